"""The service's HTTP plumbing on Starlette/uvicorn: errors, access log, limits, serving.

What every route of the memory service shares, apart from what it does:

* :class:`AnsweringRoute` — the FastAPI route class of every ``/v1`` route:
  each failure becomes the JSON error of :mod:`mongomem.sdk.errormap` (a 5xx
  says only what failed; the details go to the log), a request that does not
  fit its schema a 422 (400 for a body that is not JSON) naming the field, and
  every answer is counted in ``mongomem_service_requests_total`` and timed. A
  client that hung up mid-request (an import's body cut off) is logged at INFO
  and counted as status 499, with no traceback.
* :class:`Plumbing` — the ASGI middleware around the app: path segments are
  matched as they were encoded (an id holding ``/`` travels as ``%2F``), a
  body above its limit answers 413 before it is read whole, and the access log
  writes one line a request without the query string or any header (a key sent
  as ``?api_key=`` never lands in a log).
* :func:`start_server` — uvicorn on a host and port (``0``: a free one) over
  plain HTTP or TLS, with its signal handling left to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any
from urllib.parse import unquote

from pydantic_core import to_json
from pymongo.errors import PyMongoError

from mongomem.errors import DeadlineExceeded, InputError, MongomemError, StorageError
from mongomem.extras import require
from mongomem.sdk.errormap import error_body, status_for

with require("service"):
    import uvicorn
    from fastapi import Request, Response
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from fastapi.routing import APIRoute
    from prometheus_client import REGISTRY, Counter, Gauge, Histogram
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CLIENT_CLOSED",
    "EMBEDDING_QUEUE_JOBS",
    "EMBEDDING_QUEUE_TOKENS",
    "REQUESTS",
    "REQUEST_SECONDS",
    "AnsweringRoute",
    "Plumbing",
    "RunningServer",
    "embedding_queue_observer",
    "error_response",
    "http_error_response",
    "result",
    "segment",
    "start_server",
    "user_route",
]

log = logging.getLogger("mongomem.service")
#: The status a request is counted with when its client hung up before its answer
#: (nginx's 499; nothing is sent, nobody listens).
CLIENT_CLOSED = 499
access_log = logging.getLogger("mongomem.service.access")

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
EMBEDDING_QUEUE_JOBS = Gauge(
    "mongomem_service_embedding_queue_jobs",
    "Embedding jobs waiting for the model, per lane (stored texts, queries)",
    ["lane"],
    registry=REGISTRY,
)
EMBEDDING_QUEUE_TOKENS = Gauge(
    "mongomem_service_embedding_queue_tokens",
    "Estimated tokens of the embedding jobs waiting, per lane",
    ["lane"],
    registry=REGISTRY,
)


def embedding_queue_observer(lane: str) -> Callable[[int, int], None]:
    """The :data:`~mongomem.service.scheduling.DepthObserver` of one lane: moves its two gauges."""
    jobs, tokens = EMBEDDING_QUEUE_JOBS.labels(lane), EMBEDDING_QUEUE_TOKENS.labels(lane)

    def observe(job_change: int, token_change: int) -> None:
        jobs.inc(job_change)
        tokens.inc(token_change)

    return observe


class _JSONBytes(Response):
    """A JSON answer whose body is already encoded."""

    media_type = "application/json"


def result(value: Any, status: int = 200) -> Response:
    """A success: ``{"result": ...}``, encoded in one step by pydantic-core (as
    :func:`~pydantic_core.to_jsonable_python` then ``json.dumps`` would, faster)."""
    return _JSONBytes(to_json({"result": value}, inf_nan_mode="null"), status_code=status)


def error_response(exc: MongomemError, status: int | None = None) -> JSONResponse:
    """The JSON error answer; a 5xx says only what failed (the details go to the log)."""
    code = status or status_for(exc)
    if code >= 500:
        log.warning("answering %d: %s: %s", code, type(exc).__name__, exc)
    body = error_body(exc, redact=True)
    headers = {}
    if body.retry_after is not None:
        headers["Retry-After"] = str(int(body.retry_after))
    if code == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="mongomem"'
    return JSONResponse(
        {"error": body.model_dump(exclude_none=True)}, status_code=code, headers=headers
    )


def http_error_response(exc: HTTPException) -> JSONResponse:
    """A routing answer (404, 405 with its ``Allow``, 413) in the service's error shape."""
    if exc.status_code == 413:
        return error_response(InputError("the request body is too large", field="body"), 413)
    kind = "NotFound" if exc.status_code == 404 else "HTTPError"
    kept = {k: v for k, v in (exc.headers or {}).items() if k.lower() in ("allow", "retry-after")}
    return JSONResponse(
        {"error": {"type": kind, "message": str(exc.detail), "retriable": False}},
        status_code=exc.status_code,
        headers=kept,
    )


def _validation_error(exc: RequestValidationError) -> InputError:
    """The first problem of a request, as the :class:`InputError` naming its field."""
    first = exc.errors()[0]
    loc = [str(part) for part in first.get("loc", ())]
    where, rest = (loc[0], loc[1:]) if loc else ("body", [])
    if first.get("type") == "json_invalid":
        return InputError(f"the body is not JSON: {first.get('msg')}", field="body")
    if where == "body" and first.get("type") in ("model_attributes_type", "dict_type"):
        return InputError("the body must be a JSON object", field="body")
    if where == "body" and first.get("type") == "missing" and not rest:
        return InputError("the body is missing: send a JSON object", field="body")
    if first.get("type") in ("union_tag_invalid", "union_tag_not_found"):  # a bad "choice"
        tag = str((first.get("ctx") or {}).get("discriminator", "")).strip("'")
        rest = [*rest, tag] if tag else rest
    field = ".".join(rest) or where
    return InputError(f"{field}: {first.get('msg')}", field=field)


def _label(request: Request) -> str:
    route = request.scope.get("route")
    name = getattr(route, "name", None)
    return name if isinstance(name, str) else "other"


def _count(label: str, status: int, started: float) -> None:
    REQUESTS.labels(label, str(status)).inc()
    REQUEST_SECONDS.labels(label).observe(time.perf_counter() - started)


class _TooLarge(Exception):
    """A body past its limit while it is read (one sent without a Content-Length)."""


class AnsweringRoute(APIRoute):
    """A route whose every failure is a JSON error of ours, counted and timed (module doc)."""

    def status_of(self, exc: MongomemError) -> int | None:
        """The status of ``exc`` on this route, where it is not the usual one (subclasses)."""
        return None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def answer(request: Request) -> Response:
            started = time.perf_counter()
            response: Response
            try:
                response = await handle(request)
            except MongomemError as exc:
                if isinstance(exc, DeadlineExceeded) and exc.retry_after is None:
                    fair = getattr(request.app.state, "embedder", None)  # how long its queue is
                    exc.retry_after = getattr(fair, "expected_wait_s", None)
                response = error_response(exc, self.status_of(exc))
            except RequestValidationError as exc:
                response = error_response(_validation_error(exc))
            except HTTPException as exc:
                if isinstance(exc.__cause__, _TooLarge):  # FastAPI wraps what reading raised
                    exc = HTTPException(413)
                response = http_error_response(exc)
            except _TooLarge:  # a body read by the endpoint itself (an import)
                response = http_error_response(HTTPException(413))
            except ClientDisconnect:  # nobody is listening: no answer, no traceback
                log.info("the client of %s hung up before its answer", request.url.path)
                response = Response(status_code=CLIENT_CLOSED)
            except PyMongoError as exc:  # an adapter that did not translate it
                response = error_response(StorageError(f"MongoDB failed: {exc}"))
            except Exception:
                log.exception("unexpected error answering %s", request.url.path)
                response = error_response(MongomemError("internal error"))
            _count(_label(request), response.status_code, started)
            return response

        return answer


async def unrouted(request: Request, exc: Exception) -> Response:
    """The app's handler for what no route took (404, 405): the same shape, counted.

    A 405's ``Allow`` lists the methods of every route of the most literal path
    template that matches (Starlette's names only the first route it tried).
    """
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        path = request.scope.get("path", "")
        matching = [
            route
            for route in getattr(request.app.state, "routes", ())
            if isinstance(route, APIRoute) and route.path_regex.match(path)
        ]
        # the routes of the most literal template that matches: /v1/spaces/import is
        # its own path, not /v1/spaces/{space_id} (as the document lists them)
        fewest = min((route.path.count("{") for route in matching), default=0)
        allowed = {
            method
            for route in matching
            if route.path.count("{") == fewest
            for method in route.methods or ()
        }
        if allowed:
            exc = HTTPException(405, exc.detail, headers={"Allow": ", ".join(sorted(allowed))})
    response = http_error_response(exc)
    REQUESTS.labels("other", str(response.status_code)).inc()
    return response


def segment(value: str) -> str:
    """A path parameter as the client meant it (see :class:`Plumbing`)."""
    return unquote(value)


def _match_path(raw: bytes) -> str:
    """The path routes are matched on: decoded, but ``%2F`` and ``%25`` kept escaped.

    So an id holding ``/`` stays one segment; :func:`segment` decodes the rest.
    """
    text = raw.decode("latin-1")
    for escaped, doubled in (("%25", "%2525"), ("%2F", "%252F"), ("%2f", "%252F")):
        text = text.replace(escaped, doubled)
    return unquote(text)


@dataclass(frozen=True)
class BodyLimits:
    """The largest body of a request: ``default``, or the first prefix of ``by_path`` it
    has, or ``by_user_route[name]`` for exactly ``/v1/users/{user_id}/{name}``."""

    default: int
    by_path: Mapping[str, int]
    by_user_route: Mapping[str, int] = dataclass_field(default_factory=dict)

    def of(self, path: str) -> int:
        for prefix, limit in self.by_path.items():
            if path.startswith(prefix):
                return limit
        name = user_route(path)
        return self.default if name is None else self.by_user_route.get(name, self.default)


def user_route(path: str) -> str | None:
    """``name`` for exactly ``/v1/users/{user_id}/{name}``, else ``None`` (an escaped
    "/" in the user id stays %2F in the path, so it cannot add a segment)."""
    parts = path.split("/")
    if len(parts) == 5 and parts[:3] == ["", "v1", "users"] and parts[3]:
        return parts[4]
    return None


class Plumbing:
    """ASGI middleware: path matching, body limits and the access log (module doc)."""

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        scope = dict(scope, path=_match_path(raw.split(b"?", 1)[0]))
        limit = self.limits.of(scope["path"])
        declared = _content_length(scope)
        started = time.perf_counter()
        status = 500
        sent = False

        async def send_logged(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status, sent = int(message["status"]), True
            await send(message)

        received = 0

        async def receive_limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
            return message

        try:
            if declared is not None and declared > limit:
                raise _TooLarge
            await self.app(scope, receive_limited, send_logged)
        except _TooLarge:
            if sent:
                raise
            too_large = InputError("the request body is too large", field="body")
            await error_response(too_large, 413)(scope, receive, send_logged)
        finally:
            _log_access(scope, status, time.perf_counter() - started)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _log_access(scope: Scope, status: int, seconds: float) -> None:
    """One line: client, method, path (escaped, no query string), status, time. No header."""
    client = scope.get("client")
    where = client[0] if client else "-"
    path = scope.get("path", "").encode("unicode_escape").decode("ascii")[:512]
    method = str(scope.get("method", "")).encode("unicode_escape").decode("ascii")[:16]
    access_log.info('%s "%s %s" %d %.1fms', where, method, path, status, seconds * 1000)


class _Server(uvicorn.Server):
    """uvicorn, leaving signals to whoever runs it (``mongomem serve``, a test)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class RunningServer:
    """A server started by :func:`start_server`: its URL, and :meth:`stop`."""

    url: str
    port: int
    server: uvicorn.Server
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_server(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    tls: ssl.SSLContext | None = None,
    log_level: str = "warning",
) -> RunningServer:
    """Serve ``app`` on ``host:port`` (``0``: a free port) until :meth:`RunningServer.stop`."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        access_log=False,  # uvicorn's would write the query string: Plumbing logs instead
        log_level=log_level,
        lifespan="on",
        ssl_context_factory=None if tls is None else lambda _config, _default: tls,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(), name=f"uvicorn:{host}:{port}")
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start
            raise StorageError("the HTTP server stopped before it started")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    scheme = "http" if tls is None else "https"
    shown = f"[{host}]" if ":" in host else host
    return RunningServer(f"{scheme}://{shown}:{bound}", int(bound), server, task)
