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

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StrictBool
from pydantic_core import to_jsonable_python

from mongomem.embeddings import Embedder, make_embedder
from mongomem.errors import InputError, MongomemError, ScopeError
from mongomem.extras import require
from mongomem.sdk.wire import Answer
from mongomem.service.app import authorise, backend_of
from mongomem.service.http import AnsweringRoute, result, segment
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces
from mongomem.spaces.models import (
    AddResult,
    EscalationDecision,
    FeedbackView,
    PlaygroundResult,
    RecallHit,
    RekeyResult,
    Space,
    SpaceItem,
    SpaceUpdate,
)
from mongomem.spaces.wire import decode_choice, decode_inputs

with require("service"):
    from fastapi import APIRouter, Depends, Query, Request, Response
    from fastapi.responses import JSONResponse

__all__ = ["CONFIRMATION_REQUIRED", "MAX_IMPORT_BYTES", "SpacesRegistry", "spaces_router"]

#: The largest NDJSON body ``POST /v1/spaces/import`` reads.
MAX_IMPORT_BYTES = 64 * 1024 * 1024
#: The ``error.type`` of a 409: a key change that needs ``confirm: true``.
CONFIRMATION_REQUIRED = "ConfirmationRequired"


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
                self._settings, project_id=project_id, embedder=self._embedder,
                client=backend_of(request).client,
            )  # fmt: skip
            self._open[project_id] = spaces
        return spaces

    async def close(self) -> None:
        for spaces in self._open.values():
            await spaces.close()  # never the shared client
        self._open.clear()


# -- request bodies: shapes only; AsyncSpaces checks values and names the field --


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project_id: Any = None


class CreateSpace(_Body):
    space_id: Any
    keys: Any
    name: Any = None
    description: Any = ""
    kind: Any = "episodic"
    recall: Any = None
    encrypted: Any = False


class UpdateSpace(_Body):
    name: Any = None
    description: Any = None
    recall: Any = None
    keys: Any = None
    encrypted: Any = None
    confirm: StrictBool = False


class AttachAgent(_Body):
    agent_id: Any
    keys: Any = None


class Lookup(_Body):
    inputs: Any
    agent_id: Any = None


class AddItem(Lookup):
    outputs: Any = None
    outcome: Any = None
    comment: Any = ""
    sentiment: Any = "neutral"
    on_duplicate: Any = None


class Promote(Lookup):
    trace_id: Any
    outputs: Any
    comment: Any
    sentiment: Any
    part: Any = None
    outcome: Any = None
    on_duplicate: Any = None


class Resolve(Lookup):
    resolution: Any
    outcome: Any
    resolved_by: Any = None


class UpdateItem(_Body):
    outputs: Any = None
    outcome: Any = None
    inputs: Any = None


class AddFeedback(_Body):
    comment: Any
    sentiment: Any
    by: Any = None


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

    def body(self, body: _Body) -> _Body:
        _check_project(body.project_id, self.project)
        return body


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


# -- routes -----------------------------------------------------------------------

router = APIRouter(prefix="/v1/spaces", route_class=_SpacesRoute, tags=["spaces"])
_SPACE = "/{space_id}"
_ITEM = "/{space_id}/items/{item_id}"


@router.get("", response_model=Answer[list[Space]], summary="The project's spaces")
async def list_spaces(o: Opened) -> Response:
    return result(await o.spaces.list_spaces())


@router.post("", status_code=201, response_model=Answer[Space], summary="Create a space")
async def create_space(o: Opened, b: CreateSpace) -> Response:
    o.body(b)
    created = await o.spaces.create_space(
        b.space_id, keys=b.keys, name=b.name, description=b.description, kind=b.kind,
        recall=b.recall, encrypted=b.encrypted,
    )  # fmt: skip
    return result(created, 201)


@router.post(
    "/import", status_code=201, response_model=Answer[Space],
    summary="Import a space from its JSON-lines export (the body)",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/x-ndjson": {"schema": {"type": "string"}}}}},
)  # fmt: skip
async def import_space(
    request: Request,
    o: Opened,
    space_id: Annotated[str | None, Query()] = None,
    encrypted: Annotated[str | None, Query(description="true or false")] = None,
    reembed: Annotated[str, Query(description="auto, always or never")] = "auto",
) -> Response:
    raw = await request.body()  # bounded by the service's body limit for this path
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the export is not UTF-8: {exc}", field="body") from None
    space = await o.spaces.import_space(
        text.splitlines(), space_id=space_id, encrypted=_flag(encrypted, "encrypted"),
        reembed=reembed,  # the call names a bad value
    )  # fmt: skip
    return result(space, 201)


@router.get(_SPACE, response_model=Answer[Space], summary="One space")
async def get_space(o: Opened, space_id: str) -> Response:
    return result(await o.spaces.get_space(segment(space_id)))


@router.patch(
    _SPACE, response_model=Answer[SpaceUpdate],
    summary="Change a space (a key change needs confirm: true, else 409)",
)  # fmt: skip
async def update_space(o: Opened, space_id: str, b: UpdateSpace) -> Response:
    o.body(b)
    update = await o.spaces.update_space(
        segment(space_id), name=b.name, description=b.description,
        recall=b.recall, keys=b.keys, encrypted=b.encrypted, confirm=b.confirm,
    )  # fmt: skip
    if update.applied:
        return result(update)
    error = {"type": CONFIRMATION_REQUIRED, "message": update.warning or "confirm the change",
             "retriable": False, "field": "confirm"}  # fmt: skip
    return JSONResponse({"error": error, "result": to_jsonable_python(update)}, status_code=409)


@router.delete(_SPACE, response_model=Answer[int], summary="Delete a space (items deleted)")
async def delete_space(o: Opened, space_id: str) -> Response:
    return result(await o.spaces.delete_space(segment(space_id)))


@router.post(f"{_SPACE}/agents", response_model=Answer[Space], summary="Attach an agent")
async def attach_agent(o: Opened, space_id: str, b: AttachAgent) -> Response:
    o.body(b)
    return result(await o.spaces.attach_agent(segment(space_id), b.agent_id, keys=b.keys))


@router.delete(
    f"{_SPACE}/agents/{{agent_id}}", response_model=Answer[Space], summary="Detach an agent"
)
async def detach_agent(o: Opened, space_id: str, agent_id: str) -> Response:
    return result(await o.spaces.detach_agent(segment(space_id), segment(agent_id)))


@router.get(f"{_SPACE}/items", response_model=Answer[list[SpaceItem]], summary="The items")
async def list_items(o: Opened, space_id: str) -> Response:
    return result(await o.spaces.list_items(segment(space_id)))


@router.post(f"{_SPACE}/items", response_model=Answer[AddResult], summary="Add an item")
async def add_item(o: Opened, space_id: str, b: AddItem) -> Response:
    o.body(b)
    added = await o.spaces.add_item(
        segment(space_id), inputs=decode_inputs(b.inputs), outputs=b.outputs,
        outcome=b.outcome, comment=b.comment, sentiment=b.sentiment, agent_id=b.agent_id,
        on_duplicate=decode_choice(b.on_duplicate),
    )  # fmt: skip
    return result(added)


@router.get(_ITEM, response_model=Answer[SpaceItem], summary="One item")
async def get_item(o: Opened, space_id: str, item_id: str) -> Response:
    return result(await o.spaces.get_item(segment(space_id), segment(item_id)))


@router.patch(_ITEM, response_model=Answer[SpaceItem], summary="Change an item")
async def update_item(o: Opened, space_id: str, item_id: str, b: UpdateItem) -> Response:
    o.body(b)
    given = {k: getattr(b, k) for k in ("outcome", "inputs") if k in b.model_fields_set}
    item = await o.spaces.update_item(
        segment(space_id), segment(item_id), outputs=b.outputs, **given
    )
    return result(item)


@router.delete(_ITEM, response_model=Answer[bool], summary="Delete an item (404 if none)")
async def delete_item(o: Opened, space_id: str, item_id: str) -> Response:
    space, item = segment(space_id), segment(item_id)
    if not await o.spaces.delete_item(space, item):  # 404, as the README says
        raise InputError(f"no item {item!r} in space {space!r}", field="item_id")
    return result(True)


@router.post(f"{_ITEM}/feedback", response_model=Answer[SpaceItem], summary="Add feedback")
async def add_feedback(o: Opened, space_id: str, item_id: str, b: AddFeedback) -> Response:
    o.body(b)
    item = await o.spaces.add_feedback(
        segment(space_id), segment(item_id), comment=b.comment, sentiment=b.sentiment, by=b.by
    )
    return result(item)


@router.get(
    f"{_SPACE}/feedback", response_model=Answer[list[FeedbackView]],
    summary="The feedback of the last 30 days, newest first",
)  # fmt: skip
async def feedback(
    o: Opened, space_id: str, item_id: Annotated[str | None, Query()] = None
) -> Response:
    return result(await o.spaces.feedback(segment(space_id), item_id=item_id))


def _lookup(name: str, answer: Any, summary: str) -> None:
    """``recall``, ``find_duplicates``, ``playground`` or ``check_escalation``."""

    async def route(o: Opened, space_id: str, b: Lookup) -> Response:
        o.body(b)
        call = getattr(o.spaces, name)
        return result(await call(segment(space_id), decode_inputs(b.inputs), agent_id=b.agent_id))

    path = {"recall": "recall", "find_duplicates": "duplicates", "playground": "playground",
            "check_escalation": "escalations/check"}[name]  # fmt: skip
    router.add_api_route(
        f"{_SPACE}/{path}", route, methods=["POST"], name=name, summary=summary,
        response_model=Answer[answer],
    )  # fmt: skip


_lookup("recall", list[RecallHit], "The most similar past cases, with scores")
_lookup("find_duplicates", list[RecallHit], "Items that would be duplicates of these inputs")
_lookup("playground", PlaygroundResult, "Recall with every score and threshold shown")


@router.post(f"{_SPACE}/promote", response_model=Answer[AddResult], summary="Promote feedback")
async def promote(o: Opened, space_id: str, b: Promote) -> Response:
    o.body(b)
    added = await o.spaces.promote_feedback(
        segment(space_id), trace_id=b.trace_id, inputs=decode_inputs(b.inputs),
        outputs=b.outputs, comment=b.comment, sentiment=b.sentiment, part=b.part,
        outcome=b.outcome, agent_id=b.agent_id, on_duplicate=decode_choice(b.on_duplicate),
    )  # fmt: skip
    return result(added)


@router.post(
    f"{_SPACE}/escalations", response_model=Answer[SpaceItem], summary="Resolve an escalation"
)
async def resolve_escalation(o: Opened, space_id: str, b: Resolve) -> Response:
    o.body(b)
    item = await o.spaces.resolve_escalation(
        segment(space_id), inputs=decode_inputs(b.inputs), resolution=b.resolution,
        outcome=b.outcome, agent_id=b.agent_id, resolved_by=b.resolved_by,
    )  # fmt: skip
    return result(item)


_lookup("check_escalation", EscalationDecision, "Whether a past resolution answers these inputs")


@router.get(
    f"{_SPACE}/export", summary="The space and its items as JSON lines (header first)",
    response_class=Response,
    responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}}},
)  # fmt: skip
async def export_space(o: Opened, space_id: str) -> Response:
    lines = await o.spaces.export_space(segment(space_id))
    return Response("".join(line + "\n" for line in lines), media_type="application/x-ndjson")


@router.post(f"{_SPACE}/rekey", response_model=Answer[RekeyResult], summary="Re-seal a space")
async def rekey_space(o: Opened, space_id: str) -> Response:
    return result(await o.spaces.rekey_space(segment(space_id)))


def spaces_router() -> APIRouter:
    """The space routes (the module table), to include in the service's app."""
    return router
