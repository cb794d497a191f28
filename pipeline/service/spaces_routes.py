"""Memory spaces over HTTP (SPEC H over G2): the :class:`~mongomem.spaces.AsyncSpaces`
calls as routes of the memory service.

The project is always the API key's. No path names one; a body or query that
names another project is refused (403), as on the memory routes. A success
answers ``{"result": ...}``: the JSON form of what the
:class:`~mongomem.spaces.AsyncSpaces` call returns (:mod:`mongomem.spaces.wire`).

======================================================  ==================================
route                                                   call (result)
======================================================  ==================================
``GET    /v1/spaces``                                   ``list_spaces`` ([Space])
``POST   /v1/spaces``                                   ``create_space`` (Space, 201)
``POST   /v1/spaces/import?space_id=&encrypted=&reembed=``  ``import_space`` (Space, 201);
                                                        the body is the NDJSON export
``GET    /v1/spaces/{space}``                           ``get_space`` (Space)
``PATCH  /v1/spaces/{space}``                           ``update_space`` (SpaceUpdate)
``DELETE /v1/spaces/{space}``                           ``delete_space`` (items deleted)
``POST   /v1/spaces/{space}/agents``                    ``attach_agent`` (Space)
``DELETE /v1/spaces/{space}/agents/{agent}``            ``detach_agent`` (Space)
``GET    /v1/spaces/{space}/items``                     ``list_items`` ([SpaceItem])
``POST   /v1/spaces/{space}/items``                     ``add_item`` (AddResult)
``GET    /v1/spaces/{space}/items/{item}``              ``get_item`` (SpaceItem)
``PATCH  /v1/spaces/{space}/items/{item}``              ``update_item`` (SpaceItem)
``DELETE /v1/spaces/{space}/items/{item}``              ``delete_item`` (bool)
``POST   /v1/spaces/{space}/items/{item}/feedback``     ``add_feedback`` (SpaceItem)
``GET    /v1/spaces/{space}/feedback?item_id=``         ``feedback`` ([FeedbackView])
``POST   /v1/spaces/{space}/recall``                    ``recall`` ([RecallHit])
``POST   /v1/spaces/{space}/duplicates``                ``find_duplicates`` ([RecallHit])
``POST   /v1/spaces/{space}/playground``                ``playground`` (PlaygroundResult)
``POST   /v1/spaces/{space}/promote``                   ``promote_feedback`` (AddResult)
``POST   /v1/spaces/{space}/escalations``               ``resolve_escalation`` (SpaceItem)
``POST   /v1/spaces/{space}/escalations/check``         ``check_escalation``
                                                        (EscalationDecision)
``GET    /v1/spaces/{space}/export``                    ``export_space`` (NDJSON body)
``POST   /v1/spaces/{space}/rekey``                     ``rekey_space`` (RekeyResult)
======================================================  ==================================

Errors are those of the memory routes (:mod:`mongomem.sdk.errormap`), the
per-key rate limit (429) included, plus two:

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

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError
from pydantic_core import to_jsonable_python

from mongomem.embeddings import Embedder, make_embedder
from mongomem.errors import InputError, ScopeError
from mongomem.extras import require
from mongomem.service.app import BACKEND, _authorise, _error_response
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces
from mongomem.spaces.wire import decode_choice, decode_inputs

with require("service"):
    from aiohttp import web

__all__ = ["CONFIRMATION_REQUIRED", "MAX_IMPORT_BYTES", "SpacesRegistry", "add_spaces_routes"]

#: The largest NDJSON body ``POST /v1/spaces/import`` reads.
MAX_IMPORT_BYTES = 64 * 1024 * 1024
#: The ``error.type`` of a 409: a key change that needs ``confirm: true``.
CONFIRMATION_REQUIRED = "ConfirmationRequired"

B = TypeVar("B", bound="_Body")


class SpacesRegistry:
    """One :class:`AsyncSpaces` per project, made on first use (the service's client)."""

    def __init__(self, settings: Settings, embedder: Embedder | None) -> None:
        self._settings = settings
        self._embedder = embedder
        self._open: dict[str, AsyncSpaces] = {}

    def of(self, request: web.Request, project_id: str) -> AsyncSpaces:
        spaces = self._open.get(project_id)
        if spaces is None:
            if self._embedder is None:
                self._embedder = make_embedder(self._settings.embedding)
            spaces = AsyncSpaces(
                self._settings, project_id=project_id, embedder=self._embedder,
                client=request.app[BACKEND].client,
            )  # fmt: skip
            self._open[project_id] = spaces
        return spaces

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for spaces in self._open.values():
                await spaces.close()  # never the shared client
            self._open.clear()


REGISTRY = web.AppKey("spaces", SpacesRegistry)


# -- request bodies: shapes only; AsyncSpaces checks values and names the field --


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project_id: Any = None


class _Create(_Body):
    space_id: Any
    keys: Any
    name: Any = None
    description: Any = ""
    kind: Any = "episodic"
    recall: Any = None
    encrypted: Any = False


class _Update(_Body):
    name: Any = None
    description: Any = None
    recall: Any = None
    keys: Any = None
    encrypted: Any = None
    confirm: StrictBool = False


class _Agent(_Body):
    agent_id: Any
    keys: Any = None


class _Inputs(_Body):
    inputs: Any
    agent_id: Any = None


class _AddItem(_Inputs):
    outputs: Any = None
    outcome: Any = None
    comment: Any = ""
    sentiment: Any = "neutral"
    on_duplicate: Any = None


class _Promote(_Inputs):
    trace_id: Any
    outputs: Any
    comment: Any
    sentiment: Any
    part: Any = None
    outcome: Any = None
    on_duplicate: Any = None


class _Resolve(_Inputs):
    resolution: Any
    outcome: Any
    resolved_by: Any = None


class _ItemUpdate(_Body):
    outputs: Any = None
    outcome: Any = None
    inputs: Any = None


class _Feedback(_Body):
    comment: Any
    sentiment: Any
    by: Any = None


# -- plumbing -------------------------------------------------------------------


def _check_project(named: Any, project_id: str) -> None:
    if named is not None and named != project_id:
        raise ScopeError("this API key belongs to another project")


async def _project(request: web.Request) -> str:
    project = await _authorise(request)  # the key (401), then its rate limit (429)
    _check_project(request.query.get("project_id"), project)
    return project


async def _open(request: web.Request) -> tuple[AsyncSpaces, str]:
    project = await _project(request)
    return request.app[REGISTRY].of(request, project), project


async def _body(request: web.Request, model: type[B], project_id: str) -> B:
    raw = await request.read()
    try:
        body = model.model_validate_json(raw if raw.strip() else b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise InputError(f"the body is not JSON: {first['msg']}", field="body") from None
        if first["type"] == "model_type":
            raise InputError("the body must be a JSON object", field="body") from None
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise InputError(f"{field}: {first['msg']}", field=field) from None
    _check_project(body.project_id, project_id)
    return body


def _result(value: Any, status: int = 200) -> web.Response:
    return web.json_response({"result": to_jsonable_python(value)}, status=status)


def _missing(exc: InputError) -> bool:
    """A space or item that is not there (the direct call's InputError)."""
    return exc.field in ("space_id", "item_id") and str(exc).startswith("no ")


Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _not_found_as_404(route: Route) -> Route:
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await route(request)
        except InputError as exc:
            if _missing(exc):
                return _error_response(exc, 404)
            raise

    return answer


def _flag(request: web.Request, name: str) -> bool | None:
    value = request.query.get(name)
    if value is None:
        return None
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise InputError(f"{name} must be true or false", field=name)


# -- routes -----------------------------------------------------------------------


async def _list_spaces(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    return _result(await spaces.list_spaces())


async def _create_space(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Create, project)
    created = await spaces.create_space(
        b.space_id, keys=b.keys, name=b.name, description=b.description, kind=b.kind,
        recall=b.recall, encrypted=b.encrypted,
    )  # fmt: skip
    return _result(created, 201)


async def _get_space(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    return _result(await spaces.get_space(request.match_info["space_id"]))


async def _update_space(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Update, project)
    update = await spaces.update_space(
        request.match_info["space_id"], name=b.name, description=b.description,
        recall=b.recall, keys=b.keys, encrypted=b.encrypted, confirm=b.confirm,
    )  # fmt: skip
    if update.applied:
        return _result(update)
    error = {"type": CONFIRMATION_REQUIRED, "message": update.warning or "confirm the change",
             "retriable": False, "field": "confirm"}  # fmt: skip
    return web.json_response({"error": error, "result": to_jsonable_python(update)}, status=409)


async def _delete_space(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    return _result(await spaces.delete_space(request.match_info["space_id"]))


async def _attach(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Agent, project)
    return _result(await spaces.attach_agent(request.match_info["space_id"], b.agent_id,
                                             keys=b.keys))  # fmt: skip


async def _detach(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    space_id, agent_id = request.match_info["space_id"], request.match_info["agent_id"]
    return _result(await spaces.detach_agent(space_id, agent_id))


async def _list_items(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    return _result(await spaces.list_items(request.match_info["space_id"]))


async def _add_item(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _AddItem, project)
    added = await spaces.add_item(
        request.match_info["space_id"], inputs=decode_inputs(b.inputs), outputs=b.outputs,
        outcome=b.outcome, comment=b.comment, sentiment=b.sentiment, agent_id=b.agent_id,
        on_duplicate=decode_choice(b.on_duplicate),
    )  # fmt: skip
    return _result(added)


async def _get_item(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    m = request.match_info
    return _result(await spaces.get_item(m["space_id"], m["item_id"]))


async def _update_item(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _ItemUpdate, project)
    given = {k: getattr(b, k) for k in ("outcome", "inputs") if k in b.model_fields_set}
    m = request.match_info
    return _result(await spaces.update_item(m["space_id"], m["item_id"], outputs=b.outputs,
                                            **given))  # fmt: skip


async def _delete_item(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    m = request.match_info
    if not await spaces.delete_item(m["space_id"], m["item_id"]):  # 404, as the README says
        raise InputError(f"no item {m['item_id']!r} in space {m['space_id']!r}", field="item_id")
    return _result(True)


async def _add_feedback(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Feedback, project)
    m = request.match_info
    return _result(await spaces.add_feedback(
        m["space_id"], m["item_id"], comment=b.comment, sentiment=b.sentiment, by=b.by
    ))  # fmt: skip


async def _feedback(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    item_id = request.query.get("item_id")
    return _result(await spaces.feedback(request.match_info["space_id"], item_id=item_id))


def _lookup(name: str) -> Route:
    """``recall``, ``find_duplicates``, ``playground`` or ``check_escalation``."""

    async def route(request: web.Request) -> web.Response:
        spaces, project = await _open(request)
        b = await _body(request, _Inputs, project)
        call = getattr(spaces, name)
        found = await call(
            request.match_info["space_id"], decode_inputs(b.inputs), agent_id=b.agent_id
        )
        return _result(found)

    return route


async def _promote(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Promote, project)
    added = await spaces.promote_feedback(
        request.match_info["space_id"], trace_id=b.trace_id, inputs=decode_inputs(b.inputs),
        outputs=b.outputs, comment=b.comment, sentiment=b.sentiment, part=b.part,
        outcome=b.outcome, agent_id=b.agent_id, on_duplicate=decode_choice(b.on_duplicate),
    )  # fmt: skip
    return _result(added)


async def _resolve(request: web.Request) -> web.Response:
    spaces, project = await _open(request)
    b = await _body(request, _Resolve, project)
    item = await spaces.resolve_escalation(
        request.match_info["space_id"], inputs=decode_inputs(b.inputs), resolution=b.resolution,
        outcome=b.outcome, agent_id=b.agent_id, resolved_by=b.resolved_by,
    )  # fmt: skip
    return _result(item)


async def _export(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    lines = await spaces.export_space(request.match_info["space_id"])
    return web.Response(
        text="".join(line + "\n" for line in lines), content_type="application/x-ndjson"
    )


async def _import(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > MAX_IMPORT_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_IMPORT_BYTES, actual_size=size)
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the export is not UTF-8: {exc}", field="body") from None
    space = await spaces.import_space(
        text.splitlines(), space_id=request.query.get("space_id"),
        encrypted=_flag(request, "encrypted"), reembed=request.query.get("reembed", "auto"),  # type: ignore[arg-type]
    )  # fmt: skip
    return _result(space, 201)


async def _rekey(request: web.Request) -> web.Response:
    spaces, _ = await _open(request)
    return _result(await spaces.rekey_space(request.match_info["space_id"]))


def add_spaces_routes(
    app: web.Application, settings: Settings, *, embedder: Embedder | None = None
) -> None:
    """Add the space routes (the module table) to the memory service's ``app``.

    Call it before the service's ``/v1/{operation}`` route is added, so that
    ``POST /v1/spaces`` is never taken for an operation.
    """
    registry = SpacesRegistry(settings, embedder)
    app[REGISTRY] = registry
    app.cleanup_ctx.append(registry.lifecycle)
    space, item = "/v1/spaces/{space_id}", "/v1/spaces/{space_id}/items/{item_id}"
    routes: list[tuple[str, str, Route]] = [
        ("GET", "/v1/spaces", _list_spaces),
        ("POST", "/v1/spaces", _create_space),
        ("POST", "/v1/spaces/import", _import),
        ("GET", space, _get_space),
        ("PATCH", space, _update_space),
        ("DELETE", space, _delete_space),
        ("POST", f"{space}/agents", _attach),
        ("DELETE", f"{space}/agents/{{agent_id}}", _detach),
        ("GET", f"{space}/items", _list_items),
        ("POST", f"{space}/items", _add_item),
        ("GET", item, _get_item),
        ("PATCH", item, _update_item),
        ("DELETE", item, _delete_item),
        ("POST", f"{item}/feedback", _add_feedback),
        ("GET", f"{space}/feedback", _feedback),
        ("POST", f"{space}/recall", _lookup("recall")),
        ("POST", f"{space}/duplicates", _lookup("find_duplicates")),
        ("POST", f"{space}/playground", _lookup("playground")),
        ("POST", f"{space}/promote", _promote),
        ("POST", f"{space}/escalations", _resolve),
        ("POST", f"{space}/escalations/check", _lookup("check_escalation")),
        ("GET", f"{space}/export", _export),
        ("POST", f"{space}/rekey", _rekey),
    ]
    for method, path, route in routes:
        app.router.add_route(method, path, _not_found_as_404(route))
