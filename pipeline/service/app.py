"""The memory service (SPEC G2): the SDK's operations over HTTP, behind API keys.

=========================  =====  =============================================
endpoint                   auth   answer
=========================  =====  =============================================
``POST /v1/<operation>``   key    ``{"result": ...}``; see :mod:`mongomem.sdk.wire`
``GET /healthz``           none   200 while the process serves requests
``GET /readyz``            none   200, or 503 listing what is missing
                                  (:func:`~mongomem.readiness.check_ready`, MongoDB ping)
``GET /metrics``           none   Prometheus text (every ``mongomem_*`` metric)
``/v1/spaces…``            key    memory spaces (:mod:`mongomem.service.spaces_routes`)
=========================  =====  =============================================

A request is handled in this order, and the first failure answers
(:mod:`mongomem.sdk.errormap`): the key (401), the key's rate limit (429), the
body (400/422, the field named), the caller's identity inside the key's
project (403), then the same :class:`~mongomem.sdk.DirectTransport` the SDK
uses in-process. So the service gives exactly the SDK's results, validates
before anything is written (bad input stores nothing), and a key opens its
own project only (SPEC F3): the project of a request is the key's, and a body
naming another one is refused.
Identities are resolved again here (F1, F2); nothing the client resolved is
trusted. Nothing is retried: retriable failures answer 503 with ``Retry-After``.
A save sent with an ``idempotency_key`` may be retried by the client: a repeat
answers the first result and changes nothing, and a repeat that arrives while
the first is still being applied waits for it (:mod:`mongomem.sdk.idempotency`).

Rate limits (``MONGOMEM_SERVICE_RATE_LIMIT_PER_S``, ``…_BURST``) hold per API
key, on every ``/v1/…`` route and never on health, readiness or metrics: a
token bucket (:mod:`mongomem.service.limits`) in this process's memory, so
each replica of the service limits on its own. A key over its limit answers
429 with ``Retry-After`` (whole seconds) and nothing is done.

TLS: with ``MONGOMEM_SERVICE_TLS_CERT_FILE`` and ``…_KEY_FILE`` set, the port
speaks HTTPS only (TLS 1.2 at least); a certificate or key that cannot be
loaded stops the service before it listens (:mod:`mongomem.tls`). Without them
it speaks plain HTTP, for loopback or behind a TLS-terminating proxy.

Metrics: ``mongomem_service_requests_total`` (operation, status; a refusal
over the rate limit is status 429) and ``mongomem_service_request_seconds``
(operation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from mongomem.embeddings import Embedder
from mongomem.errors import InputError, MongomemError, RateLimitExceeded, ScopeError, StorageError
from mongomem.ltm import Judge, Thresholds
from mongomem.ltm.browse import MemoryFilter, make_filter
from mongomem.mongo import Document, connect, database
from mongomem.readiness import check_ready, ensure_ready
from mongomem.sdk.errormap import MEMORY_NOT_FOUND, error_body, status_for
from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX, Identity, resolve_identity
from mongomem.sdk.models import MemoryRequestContext
from mongomem.sdk.transport import DirectTransport, MemoryTransport
from mongomem.sdk.wire import (
    OPERATIONS,
    BrowseMemoriesRequest,
    BrowseSessionsRequest,
    BrowseTurnsRequest,
    Caller,
    CountMemoriesRequest,
    DeleteByKeyRequest,
    DeleteRequest,
    GetMemoryRequest,
    GetRequest,
    HistoryRequest,
    LimitRequest,
    ListRequest,
    RecordTurnRequest,
    SaveRequest,
    SearchRequest,
    SessionRequest,
)
from mongomem.service.keys import ApiKeyStore, KeyRing, hash_key, parse_env_keys
from mongomem.service.limits import RateLimiter
from mongomem.settings import Settings
from mongomem.tls import server_context

__all__ = ["REQUESTS", "REQUEST_SECONDS", "identity_of", "make_app", "serve"]

log = logging.getLogger(__name__)

REQUESTS = Counter(
    "mongomem_service_requests",
    "Requests answered by the memory service",
    ["operation", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "mongomem_service_request_seconds",
    "Time to answer one memory-service request",
    ["operation"],
    registry=REGISTRY,
)

_HEADROOM = 64 * 1024


@dataclass
class _Backend:
    settings: Settings
    keys: KeyRing
    transport: MemoryTransport
    client: AsyncMongoClient[Document]
    limiter: RateLimiter | None


BACKEND = web.AppKey("backend", _Backend)


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


async def _dispatch(t: MemoryTransport, op: str, who: Identity, a: Caller) -> Any:
    match a:
        case SaveRequest():
            # the memory kind checks every field's type and names a bad one
            fields = cast(dict[str, str], a.fields)
            if a.idempotency_key is None:
                return await t.save(who, a.memory_type, fields)
            return await t.save(who, a.memory_type, fields, idempotency_key=a.idempotency_key)
        case GetRequest():
            return await t.get(who, a.memory_type, a.key)
        case SearchRequest():
            return await t.search(who, a.memory_type, a.query, a.limit, a.domain)
        case ListRequest():
            return await t.list_memories(who, a.memory_type, a.limit, a.domain)
        case HistoryRequest():
            return await t.history(who, a.memory_id)
        case DeleteRequest():
            return await t.delete(who, a.memory_id, a.reason)
        case DeleteByKeyRequest():
            return await t.delete_by_key(who, a.memory_type, a.key, a.reason)
        case BrowseMemoriesRequest():
            return await t.browse_memories(who, _filter(a), a.limit, a.cursor)
        case CountMemoriesRequest():
            return await t.count_memories(who, _filter(a))
        case GetMemoryRequest():
            return await t.get_memory(who, a.memory_id)
        case BrowseSessionsRequest():
            return await t.browse_sessions(who, a.limit, a.cursor, a.active_since)
        case BrowseTurnsRequest():
            return await t.browse_turns(who, a.limit, a.cursor)
        case SessionRequest():
            return await t.processing_status(who)
        case RecordTurnRequest() if a.at is None:
            return await t.record_turn(who, a.role, a.content, a.metadata)
        case RecordTurnRequest():
            return await t.record_turn(who, a.role, a.content, a.metadata, at=a.at)
        case LimitRequest() if op == "recent_turns":
            return await t.recent_turns(who, a.limit)
        case LimitRequest():
            return await t.list_sessions(who, a.limit)
    return await t.list_domains(who)


def _filter(a: CountMemoriesRequest) -> MemoryFilter:
    return make_filter(a.memory_type, a.status, a.updated_since, a.key_prefix)


def _bearer(request: web.Request) -> str | None:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


async def _authorise(request: web.Request) -> str:
    """The project of the request's API key (401), if the key is within its rate (429)."""
    backend = request.app[BACKEND]
    key = _bearer(request)
    project = await backend.keys.project_of(key)
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


async def _parse(request: web.Request, model: type[Caller]) -> Caller:
    raw = await request.read()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise InputError(f"the body is not JSON: {first['msg']}", field="body") from None
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise InputError(f"{field}: {first['msg']}", field=field) from None


async def _operation(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    op = request.match_info["operation"]
    model = OPERATIONS.get(op)
    if model is None:
        raise web.HTTPNotFound(reason=f"no operation {op!r}")
    project = await _authorise(request)
    args = await _parse(request, model)
    result = await _dispatch(backend.transport, op, identity_of(project, args), args)
    if result is None:
        body = {"type": MEMORY_NOT_FOUND, "message": "no such memory", "retriable": False}
        return web.json_response({"error": body}, status=404)
    return web.json_response({"result": to_jsonable_python(result)})


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    problems = check_ready(backend.settings)
    try:
        await backend.client.admin.command("ping")
    except PyMongoError as exc:
        problems.append(f"MongoDB is unreachable: {exc}")
    return web.json_response(
        {"ready": not problems, "problems": problems}, status=503 if problems else 200
    )


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def _error_response(exc: MongomemError, status: int | None = None) -> web.Response:
    body = error_body(exc)
    headers = {}
    if body.retry_after is not None:
        headers["Retry-After"] = str(int(body.retry_after))
    code = status or status_for(exc)
    if code == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="mongomem"'
    return web.json_response(
        {"error": body.model_dump(exclude_none=True)}, status=code, headers=headers
    )


def _http_error(exc: web.HTTPException) -> web.Response:
    if exc.status == 413:
        return _error_response(InputError("the request body is too large", field="body"), 413)
    body = {"type": "NotFound" if exc.status == 404 else "HTTPError", "message": exc.reason}
    return web.json_response({"error": body}, status=exc.status)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as a JSON error (:mod:`mongomem.sdk.errormap`), and the metrics."""
    op = request.match_info.get("operation", request.path.strip("/"))
    label = op if op in OPERATIONS or op in ("healthz", "readyz", "metrics") else "other"
    started = time.perf_counter()
    response: web.StreamResponse
    try:
        response = await handler(request)
    except MongomemError as exc:
        response = _error_response(exc)
    except web.HTTPException as exc:
        response = _http_error(exc)
    except PyMongoError as exc:  # an adapter that did not translate it: MongoDB is the cause
        response = _error_response(StorageError(f"MongoDB failed: {exc}"))
    except Exception:
        log.exception("unexpected error answering %s", request.path)
        response = _error_response(MongomemError("internal error; the service log has details"))
    REQUESTS.labels(label, str(response.status)).inc()
    REQUEST_SECONDS.labels(label).observe(time.perf_counter() - started)
    return response


def make_app(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    judge: Judge | None = None,
    thresholds: Thresholds | None = None,
) -> web.Application:
    """The service as an aiohttp application (MongoDB is reached once it starts)."""
    env_keys = parse_env_keys(settings.service.api_keys)
    rate = settings.service.rate_limit_per_s
    stm = settings.stm
    # JSON may escape a byte as six: leave room for the largest turn the STM accepts
    max_size = 6 * (stm.max_content_bytes + stm.max_metadata_bytes) + _HEADROOM
    app = web.Application(middlewares=[_answer], client_max_size=max_size)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        client = connect(settings.mongodb)
        store = ApiKeyStore(database(client, settings.mongodb))
        transport = DirectTransport(
            settings, embedder=embedder, judge=judge, thresholds=thresholds, client=client
        )
        limiter = None if rate is None else RateLimiter(rate, settings.service.rate_limit_burst)
        app[BACKEND] = _Backend(settings, KeyRing(env_keys, store), transport, client, limiter)
        try:
            yield
        finally:
            await transport.close()
            await client.close()

    app.cleanup_ctx.append(lifecycle)
    from mongomem.service.spaces_routes import add_spaces_routes  # it imports this module

    add_spaces_routes(app, settings, embedder=embedder)  # /v1/spaces…, before /v1/{operation}
    app.router.add_post("/v1/{operation}", _operation)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


async def serve(
    settings: Settings, stop: asyncio.Event, *, embedder: Embedder | None = None
) -> None:
    """Serve on ``settings.service.host:port`` until ``stop`` is set: HTTPS with
    ``settings.service.tls_cert_file`` and ``tls_key_file`` (:mod:`mongomem.tls`),
    plain HTTP without them.

    Refuses to start (:class:`~mongomem.errors.NotReady`) without an embedding
    provider and an LLM (SPEC C5), and with a malformed environment key or a
    certificate and key that cannot be loaded (:class:`~mongomem.errors.ConfigError`).
    """
    ensure_ready(settings)
    service = settings.service
    tls = server_context(service.tls_cert_file, service.tls_key_file, "MONGOMEM_SERVICE_")
    app = make_app(settings, embedder=embedder)
    if not service.api_keys:
        log.warning("no MONGOMEM_SERVICE_API_KEYS: only managed keys (mongomem keys) open projects")
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, service.host, service.port, ssl_context=tls)
        await site.start()
        if tls is None:
            log.info("memory service listening on %s over plain HTTP (no TLS)", runner.addresses)
        else:
            log.info(
                "memory service listening on %s over HTTPS (TLS on, certificate %s)",
                runner.addresses,
                service.tls_cert_file,
            )
        await stop.wait()
    finally:
        await runner.cleanup()
