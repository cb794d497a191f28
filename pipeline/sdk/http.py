"""The SDK over HTTP: :class:`HttpTransport` talks to the memory service (SPEC G2).

::

    memory = AsyncMemory(project_id="travel-agent", api_key=key, base_url="http://memory:8080")
    # or, the same: AsyncMemory(project_id=..., api_key=key, transport=HttpTransport(url))

Every call is one request of the route table :data:`mongomem.sdk.wire.ROUTES`
(``/v1/users/{user_id}/…``) with ``Authorization: Bearer <api key>``.
Answers become the same models, and errors the same :mod:`mongomem.errors` classes, as with
:class:`~mongomem.sdk.DirectTransport` (:mod:`mongomem.sdk.errormap`). A
service that cannot be reached or does not answer in time raises
:class:`~mongomem.errors.StorageError` (retriable): from the SDK's side the
service *is* the storage; but an ``https://`` service whose certificate does
not verify (see ``verify``) raises :class:`~mongomem.errors.ConfigError`, as
trying again cannot help. A key over its rate limit answers 429, raised as
:class:`~mongomem.errors.RateLimitExceeded` with the service's ``retry_after``.
Nothing is retried here — except a save with an ``idempotency_key``, which is
sent again up to ``keyed_save_retries`` times after a retriable failure (no
answer in time, unreachable, 503, 429): the service recognises the repeat, so
that is safe. After a 429 the retry waits at least the ``Retry-After`` the
service gave. Any other retriable error is the caller's to retry.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from mongomem.adapters.tls import Verify
from mongomem.erasure.erase import ErasureResult, require_confirmation
from mongomem.errors import (
    ConfigError,
    InputError,
    MongomemError,
    RateLimitExceeded,
    ScopeError,
    StorageError,
)
from mongomem.ltm.browse import MemoryFilter
from mongomem.ltm.export import ImportResult
from mongomem.models import Role, SessionEnd, Turn, utcnow
from mongomem.operations.progress import ProcessingStatus
from mongomem.sdk.context import check_context_arguments
from mongomem.sdk.errormap import MEMORY_NOT_FOUND
from mongomem.sdk.idempotency import check_idempotency_key
from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX, Identity
from mongomem.sdk.models import (
    DeleteResult,
    MemoryContext,
    MemoryItem,
    MemoryPage,
    MemoryRecord,
    SaveResult,
    SearchHit,
    VersionRecord,
)
from mongomem.sdk.service_client import ServiceClient
from mongomem.sdk.wire import EXPORT_PATH, IMPORT_PATH, NDJSON, ROUTES
from mongomem.stm.search import TurnHit, TurnQuery
from mongomem.stm.turns import (
    SessionPage,
    SessionSummary,
    TurnPage,
    validate_at,
    validate_metadata,
    validate_speaker,
)

__all__ = ["HttpTransport"]

_HITS = TypeAdapter(list[SearchHit[MemoryRecord]])
_TURN_HITS = TypeAdapter(list[TurnHit])
_RECORDS = TypeAdapter(list[MemoryRecord])
_STRINGS = TypeAdapter(list[str])
_VERSIONS = TypeAdapter(list[VersionRecord])
_TURNS = TypeAdapter(list[Turn])
_SESSIONS = TypeAdapter(list[SessionSummary])


class _NotFound(Exception):
    """A 404 ``MemoryNotFound`` answer (``get`` and the deletes turn it into ``None``)."""


class HttpTransport(ServiceClient):
    """A :class:`~mongomem.sdk.MemoryTransport` that calls the memory service at ``base_url``.

    ``api_key`` may be left out when the :class:`~mongomem.sdk.AsyncMemory`
    that uses this transport is given one. ``verify`` decides which
    certificates an ``https://`` service may present (:data:`mongomem.adapters.tls.Verify`:
    default the system's CAs; the path of a private CA's bundle; an
    :class:`ssl.SSLContext`). ``client`` lets an application share (or, in
    tests, fake) its :class:`httpx.AsyncClient`, whose own ``verify`` then
    applies. A save with an idempotency key is retried ``keyed_save_retries``
    times on a retriable failure, after ``retry_backoff_s``, then twice that,
    and so on (at least the ``Retry-After`` of a 429).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
        verify: Verify = True,
        keyed_save_retries: int = 2,
        retry_backoff_s: float = 0.25,
    ) -> None:
        super().__init__(base_url, api_key, timeout_s=timeout_s, client=client, verify=verify)
        self._retries = max(0, keyed_save_retries)
        self._backoff = retry_backoff_s

    def use_api_key(self, api_key: str | None) -> None:
        """Use ``api_key`` unless this transport already has one (a different one is an error)."""
        if api_key is None or api_key == self._key:
            return
        if self._key is not None:
            raise ConfigError("the transport already has a different API key")
        self._key = api_key

    async def _call(self, operation: str, who: Identity, **args: Any) -> Any:
        for name, value in args.items():  # name what cannot be sent, as the direct path does
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InputError(f"{name} cannot be sent as JSON: {exc}", field=name) from None
        route = ROUTES[operation]
        given = {"user_id": who.user_id, "session_id": who.session_id, **args}
        if "session_id" in route.path_fields and who.session_id is None:
            who.session()  # raises the direct path's InputError naming session_id
        path = route.path.format(
            **{name: quote(str(given[name]), safe="") for name in route.path_fields}
        )
        rest = {k: v for k, v in args.items() if k not in route.path_fields and v is not None}
        params = {"project_id": who.project_id}  # the service refuses a key of another project
        if who.session_id is not None and "session_id" not in route.path_fields:
            params["session_id"] = who.session_id
        if route.method != "POST":  # GET, DELETE: the arguments are the query
            response = await self._request(route.method, path, params={**params, **rest})
        else:
            body = rest if route.arguments(operation) else None
            response = await self._request("POST", path, params=params, json=body)
        payload = self._payload(response)
        if response.status_code == 200 and isinstance(payload, dict) and "result" in payload:
            return payload["result"]
        if response.status_code == 404 and _error_type(payload) == MEMORY_NOT_FOUND:
            raise _NotFound
        raise self._error(response, payload)

    async def save(
        self,
        who: Identity,
        memory_type: str,
        fields: dict[str, str],
        idempotency_key: str | None = None,
    ) -> SaveResult:
        if idempotency_key is None:
            result = await self._call("save", who, memory_type=memory_type, fields=fields)
            return self._decode(TypeAdapter(SaveResult), result)
        key = check_idempotency_key(idempotency_key)
        for attempt in range(self._retries + 1):
            try:
                result = await self._call(
                    "save", who, memory_type=memory_type, fields=fields, idempotency_key=key
                )
                return self._decode(TypeAdapter(SaveResult), result)
            except MongomemError as exc:  # the same key again: the service answers once
                if not exc.retriable or attempt == self._retries:
                    raise
                wait = self._backoff * 2**attempt
                if isinstance(exc, RateLimitExceeded) and exc.retry_after is not None:
                    wait = max(wait, exc.retry_after)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, who: Identity, memory_type: str, key: str) -> MemoryRecord | None:
        try:
            result = await self._call("get", who, memory_type=memory_type, key=key)
        except _NotFound:
            return None
        return self._decode(TypeAdapter(MemoryRecord), result)

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]:
        result = await self._call(
            "search", who, memory_type=memory_type, query=query, limit=limit, domain=domain
        )
        return self._decode(_HITS, result)

    async def list_memories(
        self, who: Identity, memory_type: str, limit: int, domain: str | None
    ) -> list[MemoryRecord]:
        result = await self._call(
            "list_memories", who, memory_type=memory_type, limit=limit, domain=domain
        )
        return self._decode(_RECORDS, result)

    async def list_domains(self, who: Identity) -> list[str]:
        return self._decode(_STRINGS, await self._call("list_domains", who))

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
        order = check_context_arguments(include, limit_per_type, max_chars, include_turns)
        result = await self._call(
            "build_context",
            who,
            query=query,
            include=order,
            limit_per_type=limit_per_type,
            max_chars=max_chars,
            min_score=min_score,
            include_turns=include_turns,
        )
        return self._decode(TypeAdapter(MemoryContext), result)

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]:
        result = await self._call(
            "search_turns",
            who,
            query=q.query,
            limit=q.limit,
            sessions=None if q.sessions is None else list(q.sessions),
            speaker=q.speaker,
            since=None if q.since is None else q.since.isoformat(),
            until=None if q.until is None else q.until.isoformat(),
            neighbours=q.neighbours,
            as_of=None if q.as_of is None else q.as_of.isoformat(),
        )
        return self._decode(_TURN_HITS, result)

    async def history(self, who: Identity, memory_id: str) -> list[VersionRecord]:
        return self._decode(_VERSIONS, await self._call("history", who, memory_id=memory_id))

    async def delete(
        self, who: Identity, memory_id: str, reason: str | None
    ) -> DeleteResult | None:
        try:
            result = await self._call("delete", who, memory_id=memory_id, reason=reason)
        except _NotFound:
            return None
        return self._decode(TypeAdapter(DeleteResult), result)

    async def delete_by_key(
        self, who: Identity, memory_type: str, key: str, reason: str | None
    ) -> DeleteResult | None:
        try:
            result = await self._call(
                "delete_by_key", who, memory_type=memory_type, key=key, reason=reason
            )
        except _NotFound:
            return None
        return self._decode(TypeAdapter(DeleteResult), result)

    async def browse_memories(
        self, who: Identity, f: MemoryFilter, limit: int, cursor: str | None
    ) -> MemoryPage:
        result = await self._call(
            "browse_memories", who, **f.model_dump(mode="json"), limit=limit, cursor=cursor
        )
        return self._decode(TypeAdapter(MemoryPage), result)

    async def count_memories(self, who: Identity, f: MemoryFilter) -> int:
        result = await self._call("count_memories", who, **f.model_dump(mode="json"))
        return self._decode(TypeAdapter(int), result)

    async def get_memory(self, who: Identity, memory_id: str) -> MemoryItem | None:
        try:
            result = await self._call("get_memory", who, memory_id=memory_id)
        except _NotFound:
            return None
        return self._decode(TypeAdapter(MemoryItem), result)

    async def browse_sessions(
        self, who: Identity, limit: int, cursor: str | None, active_since: datetime | None
    ) -> SessionPage:
        since = None if active_since is None else _aware(active_since, "active_since")
        result = await self._call(
            "browse_sessions", who, limit=limit, cursor=cursor, active_since=since
        )
        return self._decode(TypeAdapter(SessionPage), result)

    async def browse_turns(self, who: Identity, limit: int, cursor: str | None) -> TurnPage:
        who.session()  # a session is needed: say so before sending, as the direct path does
        result = await self._call("browse_turns", who, limit=limit, cursor=cursor)
        return self._decode(TypeAdapter(TurnPage), result)

    async def processing_status(self, who: Identity) -> ProcessingStatus:
        who.session()  # a session is needed: say so before sending, as the direct path does
        result = await self._call("processing_status", who)
        return self._decode(TypeAdapter(ProcessingStatus), result)

    async def record_turn(
        self,
        who: Identity,
        role: Role | str,
        content: str,
        metadata: dict[str, Any] | None,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        # JSON would turn non-string keys into strings: check as the direct path does
        plain = None if metadata is None else validate_metadata(metadata, sys.maxsize)
        extra: dict[str, Any] = {}
        if at is not None:  # naive or far ahead: say so here; the service checks again
            extra["at"] = validate_at(at, utcnow()).isoformat()
        if speaker is not None:  # control characters: say so here; the service checks again
            extra["speaker"] = validate_speaker(speaker)
        result = await self._call(
            "record_turn", who, role=role, content=content, metadata=plain, **extra
        )
        return self._decode(TypeAdapter(Turn), result)

    async def recent_turns(self, who: Identity, limit: int) -> list[Turn]:
        return self._decode(_TURNS, await self._call("recent_turns", who, limit=limit))

    async def erase(
        self, project_id: str, user_id: str | None, session_id: str | None, *, confirm: bool
    ) -> ErasureResult:
        require_confirmation(confirm)  # say so before sending; the service checks again
        if user_id is None:
            raise ScopeError(
                "a whole project is not erased over HTTP (one API key must not wipe a "
                "project): use `mongomem erase project --yes` or a direct client"
            )
        who = Identity(
            project_id=project_id,
            user_id=user_id,
            session_id=session_id,
            service_account=user_id.startswith(SERVICE_ACCOUNT_PREFIX),
        )
        op = "erase_user" if session_id is None else "erase_session"
        result = await self._call(op, who, confirm=True)
        return self._decode(TypeAdapter(ErasureResult), result)

    async def end_session(self, who: Identity) -> SessionEnd:
        return self._decode(TypeAdapter(SessionEnd), await self._call("end_session", who))

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    async def export_user(self, project_id: str, user_id: str) -> AsyncIterator[str]:
        """``GET /v1/users/{user_id}/export``: the NDJSON stream, line by line as it arrives."""
        url = self.base_url + EXPORT_PATH.format(user_id=quote(user_id, safe=""))
        try:
            async with self._http().stream(
                "GET",
                url,
                headers=self._auth(),
                params={"project_id": project_id},
                timeout=httpx.Timeout(self._timeout, read=None),
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise self._error(response, self._payload(response))
                async for line in response.aiter_lines():
                    if line:
                        yield line + "\n"
        except httpx.HTTPError as exc:
            raise StorageError(f"the export from {self.base_url} failed: {exc}") from exc

    async def import_user(
        self, project_id: str, user_id: str, lines: AsyncIterable[bytes | str]
    ) -> ImportResult:
        """``POST /v1/users/{user_id}/import`` with the lines as an NDJSON body, streamed."""

        async def body() -> AsyncIterator[bytes]:
            async for line in lines:
                raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
                yield raw if raw.endswith(b"\n") else raw + b"\n"

        path = IMPORT_PATH.format(user_id=quote(user_id, safe=""))
        response = await self._request(
            "POST",
            path,
            params={"project_id": project_id},
            content=body(),
            headers={**self._auth(), "Content-Type": NDJSON},
            timeout=httpx.Timeout(self._timeout, read=None, write=None),
        )
        payload = self._payload(response)
        if response.status_code == 200 and isinstance(payload, dict) and "result" in payload:
            return self._decode(TypeAdapter(ImportResult), payload["result"])
        raise self._error(response, payload)

    async def list_sessions(self, who: Identity, limit: int) -> list[SessionSummary]:
        return self._decode(_SESSIONS, await self._call("list_sessions", who, limit=limit))


def _aware(at: object, field: str) -> str:
    if not isinstance(at, datetime) or at.tzinfo is None:
        raise InputError(f"{field} must be a timezone-aware datetime", field=field)
    return at.isoformat()


def _error_type(payload: Any) -> str | None:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        kind = payload["error"].get("type")
        return kind if isinstance(kind, str) else None
    return None
