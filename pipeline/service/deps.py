"""What every route of the service shares: the API-key scheme, the caller's project,
the error answers of the document, and the backend (settings, keys, transport).

:func:`authorise` is the dependency each ``/v1`` route takes (as :data:`Project`):
the project of the request's API key (401 without one it knows), within the key's
rate (429). The memory, spaces, export and inspector routes all build on this
module, and :mod:`mongomem.service.app` assembles them (none imports the app).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import BaseModel
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document
from mongomem.errors import InputError, RateLimitExceeded, ScopeError
from mongomem.extras import require
from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX, Identity, resolve_identity
from mongomem.sdk.models import MemoryRequestContext
from mongomem.sdk.transport import MemoryTransport
from mongomem.sdk.wire import Caller, ErrorBody
from mongomem.service.keys import KeyRing, hash_key
from mongomem.service.limits import RateLimiter
from mongomem.service.scheduling import TENANT
from mongomem.settings import Settings

with require("service"):
    from fastapi import Depends, Request
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

__all__ = [
    "BEARER",
    "BODY_TIMEOUT",
    "ERRORS",
    "NDJSON_BODY",
    "Backend",
    "ErrorAnswer",
    "Project",
    "authorise",
    "backend_of",
    "identity_of",
]


#: The API-key security scheme of the OpenAPI document (``Authorization: Bearer``).
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key of the project: `Authorization: Bearer <key>`. The key decides "
    "the project; `mongomem keys create` makes one.",
)


class ErrorAnswer(BaseModel):
    """A failure: ``{"error": ErrorBody}``."""

    error: ErrorBody


#: The error answers every ``/v1`` route may give, for the document. The service's app
#: applies it to every ``/v1`` router it includes (:func:`~mongomem.service.app.make_app`),
#: so a route added to any of them documents these with no code of its own; a route
#: with a status of its own (408 of an import, 409 of a confirmable change) adds it.
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorAnswer, "description": text}
    for code, text in [
        (400, "the body is not JSON (or not an export, for an import)"),
        (401, "no API key, or one this service does not know"),
        (403, "the caller is outside the key's project, a reserved id, or an erased one"),
        (404, "no such memory, session, space or item"),
        (
            409,
            "well formed, but the stored state refuses it (a space of another kind, an agent "
            "not attached, an id that exists, a turn earlier than the session's last, a "
            "cursor no such listing returned): `error.field` names what; nothing was stored",
        ),
        (413, "the body is larger than this route's limit"),
        (422, "an argument is missing or bad: `error.field` names it; nothing was stored"),
        (429, "the key is over its rate limit: see `Retry-After`"),
        (500, "an internal error: nothing of the details is said (they are logged)"),
        (503, "a dependency is unavailable or the service is busy: retry after `Retry-After`"),
    ]
}
#: The documented body of an import: NDJSON, one JSON object a line (an export: its
#: header first, its end line last; what else makes one valid is the format's, not a schema's).
NDJSON_BODY: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object"},
    "description": "one JSON object a line (NDJSON): an export, header first, end line last",
}
#: A streamed body (an import) that stalled or took too long.
BODY_TIMEOUT: dict[int | str, dict[str, Any]] = {
    408: {
        "model": ErrorAnswer,
        "description": "the body sent nothing for the idle timeout, or took longer than the "
        "total timeout; nothing was stored",
    }
}


@dataclass
class Backend:
    """What the routes share: settings, keys, the transport, the MongoDB client, limits."""

    settings: Settings
    keys: KeyRing
    transport: MemoryTransport
    client: AsyncMongoClient[Document]
    limiter: RateLimiter | None


def backend_of(request: Request) -> Backend:
    return cast(Backend, request.app.state.backend)


def identity_of(project_id: str, caller: Caller) -> Identity:
    """The identity a request acts as, inside the key's project (SPEC F1–F3)."""
    if caller.project_id != project_id:
        raise ScopeError("this API key belongs to another project")
    if caller.service_account:
        if not caller.user_id.startswith(SERVICE_ACCOUNT_PREFIX):
            raise InputError(
                f"a service account's user_id begins with {SERVICE_ACCOUNT_PREFIX!r}",
                field="user_id",
            )
        account = caller.user_id.removeprefix(SERVICE_ACCOUNT_PREFIX)
        ctx = MemoryRequestContext(service_account=account, session_id=caller.session_id)
    else:
        ctx = MemoryRequestContext(user_id=caller.user_id, session_id=caller.session_id)
    return resolve_identity(project_id, ctx)


async def authorise(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> str:
    """The project of the request's API key (401), if the key is within its rate (429)."""
    backend = backend_of(request)
    key = credentials.credentials.strip() if credentials is not None else None
    project = await backend.keys.project_of(key or None)
    TENANT.set(project)  # embedding queues are fair between projects (mongomem.service.scheduling)
    limiter = backend.limiter
    if limiter is not None and key:
        wait = limiter.acquire(hash_key(key))  # never the plaintext
        if wait > 0:
            raise RateLimitExceeded(
                f"this API key is over its rate limit of {limiter.rate_per_s:g} requests/s "
                f"(burst {limiter.burst}); retry in {wait:.2f}s",
                retry_after=wait,
            )
    return project


Project = Annotated[str, Depends(authorise)]
