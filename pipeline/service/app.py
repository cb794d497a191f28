"""The memory service (SPEC G2, G5): the SDK's operations over HTTP, behind API keys.

A FastAPI application. Its memory routes are derived from the route table
:data:`mongomem.sdk.wire.ROUTES` (``/v1/users/{user_id}/…``), the spaces
routes are :mod:`mongomem.service.spaces_routes`, and the OpenAPI 3.1
document of all of them is served at ``/openapi.json`` (with the API-key
security scheme), browsable at ``/docs``:

=========================  =====  =============================================
endpoint                   auth   answer
=========================  =====  =============================================
``/v1/users/{user_id}/…``  key    ``{"result": ...}``; see :mod:`mongomem.sdk.wire`
``/v1/spaces…``            key    memory spaces (:mod:`mongomem.service.spaces_routes`)
``GET /healthz``           none   200 while the process serves requests
``GET /readyz``            none   200, or 503 listing what is missing
                                  (:func:`~mongomem.adapters.readiness.check_ready`, MongoDB ping)
``GET /metrics``           none   Prometheus text (every ``mongomem_*`` metric)
``GET /openapi.json``      none   the OpenAPI document; ``/docs`` shows it
``/v1/inspector/…``        key    what the web inspector adds (:mod:`mongomem.service.inspector`)
``GET /ui``                none   the web inspector's page; it asks for a key
=========================  =====  =============================================

A request is handled in this order, and the first failure answers
(:mod:`mongomem.sdk.errormap`): the key (401), the key's rate limit (429), the
request's shape (400/422, the field named), the caller's identity inside the
key's project (403), then the same :class:`~mongomem.sdk.DirectTransport` the
SDK uses in-process. So the service gives exactly the SDK's results,
validates before anything is written (bad input stores nothing), and a key
opens its own project only (SPEC F3): the project of a request is the key's.
Identities are resolved again here (F1, F2); nothing the client resolved is
trusted. Nothing is retried: retriable failures answer 503 with ``Retry-After``.
A save sent with an ``idempotency_key`` may be retried by the client: a repeat
answers the first result and changes nothing, and a repeat that arrives while
the first is still being applied waits for it (:mod:`mongomem.sdk.idempotency`).

Rate limits (``MONGOMEM_SERVICE_RATE_LIMIT_PER_S``, ``…_BURST``) hold per API
key, on every ``/v1/…`` route and never on health, readiness, metrics or the
document: a token bucket (:mod:`mongomem.service.limits`) in this process's
memory, so each replica of the service limits on its own. A key over its
limit answers 429 with ``Retry-After`` (whole seconds) and nothing is done.

TLS: with ``MONGOMEM_SERVICE_TLS_CERT_FILE`` and ``…_KEY_FILE`` set, the port
speaks HTTPS only (TLS 1.2 at least); a certificate or key that cannot be
loaded stops the service before it listens (:mod:`mongomem.adapters.tls`). Without them
it speaks plain HTTP, for loopback or behind a TLS-terminating proxy.

Embedding is fair between projects and bounded in time: the service's embedder
sits behind :class:`~mongomem.service.scheduling.FairEmbedder` (queues served by
tokens, so one project's long texts cannot starve another's short ones;
micro-batches of ``MONGOMEM_SERVICE_EMBEDDING_BATCH`` texts), and every request
has a deadline (``MONGOMEM_SERVICE_REQUEST_DEADLINE_S``, default 30 s) that a
client's disconnect ends early: its queued embedding is dropped and nothing is
written (:mod:`mongomem.service.deadlines`).

Metrics: ``mongomem_service_requests_total`` (operation, status; a refusal
over the rate limit is status 429) and ``mongomem_service_request_seconds``
(operation). Errors, the access log and body limits: :mod:`mongomem.service.http`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Annotated, Any, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model
from pymongo.errors import PyMongoError

from mongomem import __version__
from mongomem.adapters.embeddings import Embedder
from mongomem.adapters.mongo import connect, database
from mongomem.adapters.readiness import check_ready, ensure_ready
from mongomem.adapters.tls import server_context
from mongomem.errors import ConfigError, ScopeError
from mongomem.extras import require
from mongomem.ltm import Judge, Thresholds
from mongomem.ltm.browse import MemoryFilter, make_filter
from mongomem.project_config import CustomTypeConfig, load_project_config
from mongomem.sdk.errormap import MEMORY_NOT_FOUND
from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX, Identity
from mongomem.sdk.transport import DirectTransport, MemoryTransport, default_embedder
from mongomem.sdk.wire import (
    OPERATIONS,
    ROUTES,
    Answer,
    BrowseMemoriesRequest,
    BrowseSessionsRequest,
    BrowseTurnsRequest,
    BuildContextRequest,
    Caller,
    CountMemoriesRequest,
    DeleteByKeyRequest,
    DeleteRequest,
    EraseSessionRequest,
    EraseUserRequest,
    GetMemoryRequest,
    GetRequest,
    HistoryRequest,
    HttpRoute,
    LimitRequest,
    ListRequest,
    RecordTurnRequest,
    SaveRequest,
    SearchRequest,
    SearchTurnsRequest,
    SessionRequest,
)
from mongomem.service.contract import exact_openapi
from mongomem.service.deadlines import RequestDeadlines
from mongomem.service.deps import (
    ERRORS,
    Backend,
    Project,
    authorise,
    backend_of,
    identity_of,
)
from mongomem.service.http import (
    REQUEST_SECONDS,
    REQUESTS,
    AnsweringRoute,
    BodyLimits,
    Plumbing,
    embedding_queue_observer,
    result,
    segment,
    start_server,
    unrouted,
    user_route,
)
from mongomem.service.keys import ApiKeyStore, KeyRing, parse_env_keys
from mongomem.service.limits import RateLimiter
from mongomem.service.scheduling import FairEmbedder
from mongomem.settings import Settings
from mongomem.stm.search import turn_query

with require("service"):
    from fastapi import APIRouter, Body, FastAPI, Path, Query, Request, Response
    from fastapi.responses import JSONResponse
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    from starlette.exceptions import HTTPException

__all__ = [
    "REQUESTS",
    "REQUEST_SECONDS",
    "authorise",
    "backend_of",
    "identity_of",
    "make_app",
    "serve",
]

log = logging.getLogger(__name__)

_HEADROOM = 64 * 1024


def _filter(a: CountMemoriesRequest) -> MemoryFilter:
    return make_filter(a.memory_type, a.status, a.updated_since, a.key_prefix)


async def _dispatch(t: MemoryTransport, op: str, who: Identity, a: Caller) -> Any:
    if op == "end_session":
        return await t.end_session(who)
    match a:
        case EraseUserRequest():
            return await t.erase(who.project_id, who.user_id, None, confirm=a.confirm)
        case EraseSessionRequest():
            return await t.erase(who.project_id, who.user_id, a.session_id, confirm=a.confirm)
        case SaveRequest():
            # the memory kind checks every field's type and names a bad one
            fields = cast(dict[str, str], a.fields)
            if a.idempotency_key is None:
                return await t.save(who, a.memory_type, fields)
            return await t.save(who, a.memory_type, fields, idempotency_key=a.idempotency_key)
        case GetRequest():
            return await t.get(who, a.memory_type, a.key)
        case BuildContextRequest():
            extra = {"include_turns": a.include_turns} if a.include_turns else {}
            return await t.build_context(
                who, a.query, a.include, a.limit_per_type, a.max_chars, a.min_score, **extra
            )
        case SearchTurnsRequest():
            q = turn_query(
                query=a.query,
                limit=a.limit,
                sessions=None if a.sessions is None else tuple(a.sessions),
                speaker=a.speaker,
                since=a.since,
                until=a.until,
                neighbours=a.neighbours,
                as_of=a.as_of,
            )
            return await t.search_turns(who, q)
        case SearchRequest():
            return await t.search(who, a.memory_type, a.query, a.limit, a.domain)
        case ListRequest():
            return await t.list_memories(who, a.memory_type, a.limit, a.domain)
        case HistoryRequest():
            versions = await t.history(who, a.memory_id)  # ordered by the world: then paged
            end = None if a.limit is None else a.offset + a.limit
            return versions[a.offset : end]
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
        case RecordTurnRequest():
            given: dict[str, Any] = {} if a.at is None else {"at": a.at}
            if a.speaker is not None:
                given["speaker"] = a.speaker
            return await t.record_turn(who, a.role, a.content, a.metadata, **given)
        case LimitRequest() if op == "recent_turns":
            return await t.recent_turns(who, a.limit)
        case LimitRequest():
            return await t.list_sessions(who, a.limit)
    return await t.list_domains(who)


def _iso_time(value: Any) -> Any:
    """A time argument is ISO 8601 text (lax parsing would also take a number of seconds)."""
    if value is None or isinstance(value, datetime):
        return value
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError("a time is ISO 8601 text, e.g. 2026-12-01T09:00:00Z") from None


def _field(annotation: Any) -> Any:
    """``annotation``, with times read only from ISO 8601 text."""
    if annotation in (datetime, datetime | None):
        return Annotated[annotation, BeforeValidator(_iso_time)]
    return annotation


def _arguments_model(op: str, route: HttpRoute) -> type[BaseModel]:
    """The operation's arguments outside the path: a query (GET) or a JSON body (POST)."""
    request = OPERATIONS[op]
    names = route.arguments(op)
    fields: dict[str, Any] = {
        name: (_field(request.model_fields[name].annotation), request.model_fields[name])
        for name in names
    }
    in_query = route.method != "POST"
    if in_query:
        fields["project_id"] = (str | None, None)
        if "session_id" not in route.path_fields:
            fields["session_id"] = (str | None, None)
    # lax: a query is text to parse, and JSON sends times as ISO strings (a str
    # is still never taken for a number, nor a number for a str)
    config = ConfigDict(extra="forbid")
    suffix = "Query" if in_query else "Body"
    name = "".join(part.title() for part in op.split("_")) + suffix
    return create_model(name, __config__=config, **fields)


def _memory_endpoint(op: str, route: HttpRoute) -> Any:
    """The endpoint of one route of :data:`ROUTES`, with the signature FastAPI documents."""
    arguments = _arguments_model(op, route)
    request_model = OPERATIONS[op]

    async def endpoint(request: Request, project: str, **given: Any) -> Response:
        args = given.pop("args", None)
        queried = {k: given.pop(k) for k in ("session_id", "project_id") if k in given}
        values = {k: segment(v) for k, v in given.items()}
        if args is not None:
            values.update(args.model_dump(exclude_unset=True))
        values.update({k: v for k, v in queried.items() if v is not None})
        named = values.pop("project_id", None)
        if named is not None and named != project:  # the client's project is not the key's
            raise ScopeError("this API key belongs to another project")
        user = values["user_id"]
        caller = {
            "project_id": project,
            "service_account": user.startswith(SERVICE_ACCOUNT_PREFIX),
            **values,
        }
        parsed = request_model.model_validate(caller, strict=False)
        backend = backend_of(request)
        answer = await _dispatch(backend.transport, op, identity_of(project, parsed), parsed)
        if answer is None:
            body = {"type": MEMORY_NOT_FOUND, "message": "no such memory", "retriable": False}
            return JSONResponse({"error": body}, status_code=404)
        return result(answer)

    params = [
        inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request),
        inspect.Parameter("project", inspect.Parameter.KEYWORD_ONLY, annotation=Project),
    ]
    for name in route.path_fields:
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[str, Path(min_length=1, max_length=1024)],
            )
        )
    if route.method != "POST":
        params.append(
            inspect.Parameter(
                "args", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[arguments, Query()]
            )
        )
    else:
        if route.arguments(op):  # a POST without arguments (end_session) takes no body
            params.append(
                inspect.Parameter(
                    "args", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[arguments, Body()]
                )
            )
        if "session_id" not in route.path_fields:
            params.append(
                inspect.Parameter(
                    "session_id",
                    inspect.Parameter.KEYWORD_ONLY,
                    default=None,
                    annotation=Annotated[str | None, Query(description="the caller's session")],
                )
            )
        params.append(
            inspect.Parameter(
                "project_id",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[str | None, Query(description="must be the key's, if given")],
            )
        )
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return endpoint


def memory_router() -> APIRouter:
    """The memory routes, one for each entry of :data:`ROUTES`."""
    router = APIRouter(route_class=AnsweringRoute, responses=ERRORS, tags=["memory"])
    for op, route in ROUTES.items():
        router.add_api_route(
            route.path,
            _memory_endpoint(op, route),
            methods=[route.method],
            name=op,
            summary=route.summary,
            response_model=Answer[route.result],  # type: ignore[name-defined]
            operation_id=op,
        )
    return router


async def _healthz() -> dict[str, str]:
    return {"status": "ok"}


class Readiness(BaseModel):
    ready: bool
    problems: list[str]


async def _readyz(request: Request) -> JSONResponse:
    backend = backend_of(request)
    problems = check_ready(backend.settings)
    try:
        await backend.client.admin.command("ping")
    except PyMongoError as exc:  # the address and topology go to the log, not to the caller
        log.warning("readiness: MongoDB is unreachable: %s", exc)
        problems.append("MongoDB is unreachable")
    return JSONResponse(
        {"ready": not problems, "problems": problems}, status_code=503 if problems else 200
    )


async def _metrics() -> Response:
    return Response(content=generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


def _custom_types(settings: Settings) -> tuple[CustomTypeConfig, ...]:
    """The custom memory types the project config declares (the OpenAPI document
    documents their reads; an unreadable config is the transport's error to tell)."""
    if settings.project_config is None:
        return ()
    try:
        config = load_project_config(settings.project_config)
    except ConfigError:
        return ()
    return config.memory.extraction.custom


def _bulk_transfer(path: str) -> bool:
    """An import or export: it streams for as long as it takes, so it has no deadline
    (which would buffer its body first)."""
    return path.startswith("/v1/spaces/import") or user_route(path) in ("import", "export")


def make_app(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    judge: Judge | None = None,
    thresholds: Thresholds | None = None,
) -> Plumbing:
    """The service as an ASGI application (MongoDB is reached once it starts).

    ``embedder`` goes behind a :class:`~mongomem.service.scheduling.FairEmbedder`
    (unless it is one already); without it, the configured one, made on first use.
    """
    from mongomem.service.docs import docs_router
    from mongomem.service.export_routes import MAX_IMPORT_BYTES as MAX_USER_IMPORT_BYTES
    from mongomem.service.export_routes import export_router
    from mongomem.service.inspector import inspector_router, ui_router
    from mongomem.service.spaces_routes import MAX_IMPORT_BYTES, SpacesRegistry, spaces_router

    env_keys = parse_env_keys(settings.service.api_keys)
    rate = settings.service.rate_limit_per_s
    stm = settings.stm
    # JSON may escape a byte as six: leave room for the largest turn the STM accepts
    max_size = 6 * (stm.max_content_bytes + stm.max_metadata_bytes) + _HEADROOM
    service = settings.service
    batch = service.embedding_batch or (16 if settings.embedding.provider == "openai" else 1)
    fair = (
        embedder
        if isinstance(embedder, FairEmbedder)
        else FairEmbedder(
            embedder if embedder is not None else partial(default_embedder, settings.embedding),
            batch_texts=batch,
            observe=embedding_queue_observer,
        )
    )
    registry = SpacesRegistry(settings, fair)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = connect(settings.mongodb)
        store = ApiKeyStore(database(client, settings.mongodb))
        transport = DirectTransport(
            settings, embedder=fair, judge=judge, thresholds=thresholds, client=client
        )
        limiter = None if rate is None else RateLimiter(rate, settings.service.rate_limit_burst)
        app.state.backend = Backend(settings, KeyRing(env_keys, store), transport, client, limiter)
        app.state.spaces = registry
        app.state.embedder = fair  # its expected wait is a busy answer's Retry-After
        try:
            yield
        finally:
            await registry.close()
            await transport.close()
            await client.close()

    app = FastAPI(
        title="mongomem memory service",
        version=__version__,
        description="Long-term memory for LLM agents: the SDK's operations and memory "
        "spaces over HTTP. Every `/v1` route needs an API key of the project.",
        lifespan=lifespan,
        docs_url=None,  # mongomem.service.docs: Swagger UI from the package, no CDN
        redoc_url=None,
        openapi_url="/openapi.json",
        exception_handlers={HTTPException: unrouted},
    )
    #: the /v1 routers: each of their routes documents every status of ERRORS (a route
    #: added to one of them gets the table with no code of its own)
    v1 = [memory_router(), export_router(), spaces_router(), inspector_router()]
    routers = [*v1, ui_router(), docs_router()]
    ops = APIRouter(route_class=AnsweringRoute, tags=["operations"])  # counted, too
    ops.add_api_route("/healthz", _healthz, methods=["GET"], name="healthz")
    ops.add_api_route(
        "/readyz",
        _readyz,
        methods=["GET"],
        name="readyz",
        responses={200: {"model": Readiness}, 503: {"model": Readiness}},
    )
    ops.add_api_route(
        "/metrics",
        _metrics,
        methods=["GET"],
        name="metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    routers.append(ops)
    for router in routers:
        app.include_router(router, responses=ERRORS if router in v1 else None)
    app.openapi = exact_openapi(  # type: ignore[method-assign]
        app.openapi, lambda: _custom_types(settings)
    )
    app.state.routes = [route for router in routers for route in router.routes]  # for Allow
    limits = BodyLimits(
        max_size, {"/v1/spaces/import": MAX_IMPORT_BYTES}, {"import": MAX_USER_IMPORT_BYTES}
    )
    timed = RequestDeadlines(app, service.request_deadline_s, exempt=_bulk_transfer)
    return Plumbing(timed, limits)


async def serve(
    settings: Settings, stop: asyncio.Event, *, embedder: Embedder | None = None
) -> None:
    """Serve on ``settings.service.host:port`` until ``stop`` is set: HTTPS with
    ``settings.service.tls_cert_file`` and ``tls_key_file`` (:mod:`mongomem.adapters.tls`),
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
    running = await start_server(app, service.host, service.port, tls=tls)
    try:
        if tls is None:
            log.info("memory service listening on %s over plain HTTP (no TLS)", running.url)
        else:
            log.info(
                "memory service listening on %s over HTTPS (TLS on, certificate %s)",
                running.url,
                service.tls_cert_file,
            )
        await stop.wait()
    finally:
        await running.stop()
