"""The streaming routes of the memory service: a user's export and an import (SPEC J4).

=====================================  ==================================================
``GET  /v1/users/{user_id}/export``    the user's export as NDJSON, streamed line by line
``POST /v1/users/{user_id}/import``    an export as the NDJSON body, read line by line;
                                       ``{"result": ImportResult}``
=====================================  ==================================================

Both act for the user inside the API key's project, resolved as every memory
route's caller is (a ``project_id`` query parameter, if given, must be the key's;
``sa:`` users are service accounts and have no memory of their own to move).
An export is checked and its header read before the answer starts, so a refusal
is a JSON error; a failure after that cuts the stream before its ``end`` line,
which an import refuses. An import body may be up to :data:`MAX_IMPORT_BYTES`, and is
read within the idle and total timeouts of :mod:`mongomem.service.streams` (408).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from mongomem.errors import InputError, ScopeError
from mongomem.extras import require
from mongomem.ltm.export import ImportResult
from mongomem.sdk.identity import SERVICE_ACCOUNT_PREFIX
from mongomem.sdk.wire import EXPORT_PATH, IMPORT_PATH, NDJSON, Answer, Caller
from mongomem.service.deps import (
    BODY_TIMEOUT,
    ERRORS,
    NDJSON_BODY,
    Project,
    backend_of,
    identity_of,
)
from mongomem.service.http import AnsweringRoute, result, segment
from mongomem.service.streams import body_lines, timed_chunks

with require("service"):
    from fastapi import APIRouter, Path, Query, Request, Response
    from fastapi.responses import StreamingResponse

__all__ = ["MAX_IMPORT_BYTES", "export_router"]

#: The largest body ``POST /v1/users/{user_id}/import`` reads (a larger export: the CLI).
MAX_IMPORT_BYTES = 256 * 1024 * 1024

UserId = Annotated[str, Path(min_length=1, max_length=1024)]
ProjectQuery = Annotated[str | None, Query(description="must be the key's, if given")]


def _user(project: str, user_id: str, named: str | None) -> str:
    """The user a streaming route acts for, resolved inside the key's project."""
    if named is not None and named != project:
        raise ScopeError("this API key belongs to another project")
    user = segment(user_id)
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        raise InputError(
            "a service account has no memory of its own to export or import", field="user_id"
        )
    who = identity_of(project, Caller(project_id=project, user_id=user))
    return who.user_id


async def export_user(
    request: Request, project: Project, user_id: UserId, project_id: ProjectQuery = None
) -> Response:
    user = _user(project, user_id, project_id)
    lines = backend_of(request).transport.export_user(project, user)
    first = await anext(lines)  # refusals answer as errors, before the stream starts

    async def stream() -> AsyncIterator[bytes]:
        yield first.encode("utf-8")
        async for line in lines:
            yield line.encode("utf-8")

    return StreamingResponse(stream(), media_type=NDJSON)


async def import_user(
    request: Request, project: Project, user_id: UserId, project_id: ProjectQuery = None
) -> Response:
    user = _user(project, user_id, project_id)
    service = backend_of(request).settings.service
    chunks = timed_chunks(request, service.import_idle_timeout_s, service.import_total_timeout_s)
    answer = await backend_of(request).transport.import_user(project, user, body_lines(chunks))
    return result(answer)


def export_router() -> APIRouter:
    """The two streaming routes, to include in the service's app."""
    router = APIRouter(route_class=AnsweringRoute, responses=ERRORS, tags=["memory"])
    router.add_api_route(
        EXPORT_PATH,
        export_user,
        methods=["GET"],
        name="export_user",
        operation_id="export_user",
        response_class=Response,
        summary="The user's memory as JSON lines: header, every version with its evidence, "
        "the decision log, an end line (streamed)",
        responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}},
    )
    router.add_api_route(
        IMPORT_PATH,
        import_user,
        methods=["POST"],
        name="import_user",
        operation_id="import_user",
        response_model=Answer[ImportResult],
        responses=BODY_TIMEOUT,
        summary="Import an export into the user: the same history, all or nothing, "
        "idempotent (the body is the NDJSON export)",
        openapi_extra={
            "requestBody": {"required": True, "content": {NDJSON: {"schema": NDJSON_BODY}}}
        },
    )
    return router
