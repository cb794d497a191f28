"""Memory spaces over HTTP (SPEC H over G2): the :class:`~mongomem.spaces.AsyncSpaces`
calls as routes of the memory service.

The project is always the API key's. No path names one; a body or query that
names another project is refused (403), as on the memory routes. A success
answers ``{"result": ...}``: the JSON form of what the
:class:`~mongomem.spaces.AsyncSpaces` call returns. Every route is derived from its
entry in :data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS` (whose docstring lists them).

The routes are FastAPI routes of the service's app (:mod:`mongomem.service.app`),
with their bodies in the OpenAPI document. Errors are those of the memory routes
(:mod:`mongomem.sdk.errormap`), the per-key rate limit (429) included, plus two:

* a space or item that is not there answers **404**, with the same body the
  :class:`~mongomem.errors.InputError` would have (``field``: ``space_id`` or
  ``item_id``), so a client raises the same exception as the direct call;
* a key change sent without ``confirm: true`` answers **409**: nothing was
  changed (not even the other fields of the request); ``error.message`` is
  the warning, ``error.field`` is ``confirm``, and ``result`` is the
  :class:`~mongomem.spaces.SpaceUpdate` (``applied: false``, the agents affected).

Each project gets one :class:`~mongomem.spaces.AsyncSpaces`, made on its first
request, on the service's MongoDB client and one shared embedder. An import
body may be up to :data:`MAX_IMPORT_BYTES`; other bodies have the service's limit.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import to_jsonable_python

from mongomem.adapters.embeddings import Embedder, make_embedder
from mongomem.errors import InputError, MongomemError, ScopeError
from mongomem.extras import require
from mongomem.sdk.spaces.wire import (
    SPACE_OPERATIONS,
    SPACES_PREFIX,
    SpaceOperation,
    decode_argument,
)
from mongomem.sdk.wire import Answer, ErrorBody
from mongomem.service.deps import BODY_TIMEOUT, NDJSON_BODY, ErrorAnswer, authorise, backend_of
from mongomem.service.http import AnsweringRoute, result, segment
from mongomem.service.streams import timed_chunks
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces, SpaceUpdate

with require("service"):
    from fastapi import APIRouter, Body, Depends, Query, Request, Response
    from fastapi.responses import JSONResponse

__all__ = ["CONFIRMATION_REQUIRED", "MAX_IMPORT_BYTES", "SpacesRegistry", "spaces_router"]

#: The largest NDJSON body ``POST /v1/spaces/import`` reads.
MAX_IMPORT_BYTES = 64 * 1024 * 1024
#: The ``error.type`` of a 409: a key change that needs ``confirm: true``.
CONFIRMATION_REQUIRED = "ConfirmationRequired"


class ConfirmationAnswer(BaseModel):
    """A 409: the change needs ``confirm: true``; ``result`` says what it would do."""

    error: ErrorBody
    result: SpaceUpdate


_CONFIRM = (
    "a key change sent without `confirm: true`: nothing was changed; `error.message` is the "
    "warning, `result` the change not applied (`applied: false`, the agents affected)"
)


class SpacesRegistry:
    """One :class:`AsyncSpaces` per project, made on first use (the service's client)."""

    def __init__(self, settings: Settings, embedder: Embedder | None) -> None:
        self._settings = settings
        self._embedder = embedder
        self._open: dict[str, AsyncSpaces] = {}

    def of(self, request: Request, project_id: str) -> AsyncSpaces:
        spaces = self._open.get(project_id)
        if spaces is None:
            if self._embedder is None:
                self._embedder = make_embedder(self._settings.embedding)
            spaces = AsyncSpaces(
                self._settings,
                project_id=project_id,
                embedder=self._embedder,
                client=backend_of(request).client,
            )
            self._open[project_id] = spaces
        return spaces

    async def close(self) -> None:
        for spaces in self._open.values():
            await spaces.close()  # never the shared client
        self._open.clear()


# -- plumbing -------------------------------------------------------------------


def _check_project(named: Any, project_id: str) -> None:
    if named is not None and named != project_id:
        raise ScopeError("this API key belongs to another project")


class _Opened:
    """The project's spaces, for a request whose key (and ``project_id``, if named) fit."""

    def __init__(self, request: Request, project: str, named: str | None) -> None:
        _check_project(named, project)
        self.project = project
        self.spaces = request.app.state.spaces.of(request, project)


async def _opened(
    request: Request,
    project: Annotated[str, Depends(authorise)],
    project_id: Annotated[str | None, Query(description="must be the key's, if given")] = None,
) -> _Opened:
    return _Opened(request, project, project_id)


Opened = Annotated[_Opened, Depends(_opened)]


def _missing(exc: InputError) -> bool:
    """A space or item that is not there (the direct call's InputError)."""
    return exc.field in ("space_id", "item_id") and str(exc).startswith("no ")


class _SpacesRoute(AnsweringRoute):
    """A spaces route: a space or item that is not there answers 404."""

    def status_of(self, exc: MongomemError) -> int | None:
        return 404 if isinstance(exc, InputError) and _missing(exc) else None


def _flag(value: str | None, name: str) -> bool | None:
    if value is None:
        return None
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise InputError(f"{name} must be true or false", field=name)


# -- routes: one for each entry of SPACE_OPERATIONS ------------------------------


def _from_query(name: str, value: str) -> Any:
    """A query argument as the call takes it (``encrypted`` is a flag)."""
    return _flag(value, name) if name == "encrypted" else value


def _body_model(name: str, op: SpaceOperation) -> type[BaseModel]:
    """The JSON object of a ``POST`` or ``PATCH``: the call's arguments outside the path,
    and the ``project_id`` it may name (the key's)."""
    fields: dict[str, Any] = {
        f: (op.request.model_fields[f].annotation, op.request.model_fields[f]) for f in op.in_body
    }
    fields["project_id"] = (str | None, Field(default=None, description="the key's, if given"))
    title = "".join(part.title() for part in name.split("_")) + "Body"
    return create_model(title, __config__=ConfigDict(extra="forbid"), **fields)


def _endpoint(name: str, op: SpaceOperation) -> Any:
    """The endpoint of ``op``, with the signature FastAPI documents."""
    body = _body_model(name, op) if op.in_body else None

    async def endpoint(request: Request, o: Opened, **given: Any) -> Response:
        values: dict[str, Any] = {k: segment(given.pop(k)) for k in op.path_fields}
        sent = given.pop("args", None)
        if sent is not None:
            _check_project(sent.project_id, o.project)
            sent_json = sent.model_dump(mode="json")  # what the call takes: JSON values
            for k in sent.model_fields_set - {"project_id"}:
                values[k] = decode_argument(k, sent_json[k])
        values.update({k: _from_query(k, v) for k, v in given.items() if v is not None})
        if op.lines_body:
            service = backend_of(request).settings.service  # bounded: the body limit, timeouts
            chunks = timed_chunks(
                request, service.import_idle_timeout_s, service.import_total_timeout_s
            )
            raw = b"".join([chunk async for chunk in chunks])
            try:
                values["lines"] = raw.decode("utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise InputError(f"the export is not UTF-8: {exc}", field="body") from None
        answer = await getattr(o.spaces, name)(**values)
        if op.lines_answer:
            text = "".join(line + "\n" for line in answer)
            return Response(text, media_type="application/x-ndjson")
        if op.missing_is_false and answer is False:  # 404, as the README says
            field = op.path_fields[-1]
            raise InputError(
                f"no {field.removesuffix('_id')} {values[field]!r} in space {values['space_id']!r}",
                field=field,
            )
        if op.confirmable and getattr(answer, "applied", True) is False:
            warning = getattr(answer, "warning", None) or "confirm the change"
            error = {
                "type": CONFIRMATION_REQUIRED,
                "message": warning,
                "retriable": False,
                "field": "confirm",
            }
            return JSONResponse(
                {"error": error, "result": to_jsonable_python(answer)}, status_code=409
            )
        return result(answer, op.status)

    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("request", keyword, annotation=Request),
        inspect.Parameter("o", keyword, annotation=Opened),
    ]
    params += [inspect.Parameter(f, keyword, annotation=str) for f in op.path_fields]
    for f in op.in_query:
        info = op.request.model_fields[f]
        if info.annotation in (int, int | None):  # a number: typed, with its bounds
            bounds = {
                k: getattr(m, k) for m in info.metadata for k in ("ge", "le") if hasattr(m, k)
            }
            query = Query(description=info.description, **bounds)
            kind: Any = int | None
        else:
            query, kind = Query(description=info.description), str | None
        params.append(
            inspect.Parameter(f, keyword, default=info.default, annotation=Annotated[kind, query])
        )
    if body is not None:
        params.append(inspect.Parameter("args", keyword, annotation=Annotated[body, Body()]))
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return endpoint


def _route_options(op: SpaceOperation) -> dict[str, Any]:
    """What the OpenAPI document says of a route beyond its parameters."""
    ndjson = {"application/x-ndjson": {"schema": {"type": "string"}}}
    options: dict[str, Any] = {"status_code": op.status}
    if op.lines_answer:
        options.update(response_class=Response, responses={200: {"content": ndjson}})
    else:
        options["response_model"] = Answer[op.result]  # type: ignore[name-defined]
    if op.lines_body:
        body = {"application/x-ndjson": {"schema": NDJSON_BODY}}
        options["openapi_extra"] = {"requestBody": {"required": True, "content": body}}
        options["responses"] = {**options.get("responses", {}), **BODY_TIMEOUT}
    if op.confirmable:
        conflict = {
            409: {
                "model": ConfirmationAnswer | ErrorAnswer,
                "description": f"{_CONFIRM}; or, as on every route, a state that refuses it",
            }
        }
        options["responses"] = {**options.get("responses", {}), **conflict}
    return options


def spaces_router() -> APIRouter:
    """The space routes, one for each entry of :data:`SPACE_OPERATIONS`."""
    router = APIRouter(prefix=SPACES_PREFIX, route_class=_SpacesRoute, tags=["spaces"])
    for name, op in SPACE_OPERATIONS.items():
        router.add_api_route(
            op.path,
            _endpoint(name, op),
            methods=[op.method],
            name=name,
            summary=op.summary,
            operation_id=f"spaces_{name}",
            **_route_options(op),
        )
    return router
