"""The web inspector (SPEC G6): a static page at ``/ui`` and the few JSON routes it needs.

The page (:mod:`mongomem.ui`: one HTML file, one script, one stylesheet, no
build step, nothing fetched from elsewhere) asks for an API key, keeps it in
the tab's ``sessionStorage`` and sends it as ``Authorization: Bearer`` on each
``fetch``: the key never appears in a URL, so never in an access log or the
browser's history. The page itself is public; everything it shows comes from
``/v1`` routes behind the key, so a key opens its own project only (SPEC F3).
The page is served with a Content-Security-Policy of ``'self'`` only.

Most views use the memory and spaces routes as they are (sessions, turns,
memories, search, history, the playground, the escalation check). The routes
here, under ``/v1/inspector``, add what the API lacked, each scoped to the
key's project:

==============================================  ===========================================
``GET /v1/inspector/users``                     the project's users: turns, sessions, memories
``GET /v1/inspector/memories/{memory_id}/decisions``  the decision log of a memory, with the
                                                reconciler's thresholds
``GET /v1/inspector/snapshots/{snapshot_id}``   one snapshot and its turns (a version's evidence)
``GET /v1/inspector/pipeline``                  consumer lag per group, the project's dead
                                                letters with their errors, stage restarts
                                                (``operations.restarts``), local processes
==============================================  ===========================================

Consumer lag is the pipeline's, shared by every project (Kafka topics are not
per project); dead letters are shown only when their original message names
the key's project, the others are only counted (``hidden_dead_letters``).
When Kafka cannot be read the status still answers, with the reason in
``problems``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import DECISIONS, MEMORIES, SNAPSHOTS, TURNS, database
from mongomem.errors import MongomemError, StorageError
from mongomem.extras import require
from mongomem.ltm.plan import Score, Thresholds
from mongomem.models import SnapshotTurn
from mongomem.operations.restarts import StageRestarts, read_restarts
from mongomem.project_config import enabled_types
from mongomem.sdk.models import check_memory_id
from mongomem.sdk.wire import Answer
from mongomem.service.deps import ERRORS, Project, backend_of
from mongomem.service.http import AnsweringRoute, result, segment
from mongomem.settings import Settings
from mongomem.stm.turns import NOT_AN_EVENT

if TYPE_CHECKING:
    from mongomem.adapters.kafka import DeadLetter

with require("service"):
    from fastapi import APIRouter, Path, Query, Request, Response
    from fastapi.responses import JSONResponse

__all__ = [
    "UI_HEADERS",
    "DecisionLog",
    "DecisionRecord",
    "PipelineStatus",
    "SnapshotView",
    "UserSummary",
    "inspector_router",
    "ui_router",
]

log = logging.getLogger(__name__)

#: How long the pipeline status waits for Kafka before answering without it.
KAFKA_WAIT_S = 10.0
#: The most recent dead letters read from each partition of each stage's topic.
DEAD_LETTERS_PER_PARTITION = 50
#: The largest ``offset`` a paged inspector route takes.
MAX_OFFSET = 1_000_000
#: Snapshot or decision-log not found in the key's project.
NOT_FOUND = "NotFound"


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UserSummary(_View):
    """A user of the project: what they said and what is remembered of them."""

    user_id: str
    turns: int
    sessions: int
    memories: int = Field(
        description="current memories the user's page lists: their own and the project's"
    )
    project_memories: int = Field(
        default=0, description="of which the project's (taxonomic terms), shared by every user"
    )
    last_activity: datetime | None


class DecisionRecord(_View):
    """One applied reconciliation decision (``decision_log``), scores and reason included."""

    candidate_id: str
    action: str
    memory_id: str
    version: int
    base_version: int | None
    memory_type: str
    key: str
    key_match: bool
    similarity: float | None
    scores: list[Score]
    reason: str
    judged: bool
    needs_judge: bool
    ask_about: str | None
    differences: list[str]
    model_says_corrects: bool | None
    attempts: int | None
    at: datetime


class DecisionLog(_View):
    """The decisions that made a memory, oldest first, and the thresholds in force."""

    memory_id: str
    thresholds: Thresholds
    decisions: list[DecisionRecord] = Field(description="this page of them (offset, limit)")
    total: int = Field(default=0, description="how many decisions the memory has in all")


class SnapshotView(_View):
    """A snapshot of a session: the turns a memory's evidence points at."""

    snapshot_id: str
    user_id: str
    session_id: str
    first_seq: int
    last_seq: int
    reason: str
    closed_at: datetime
    turns: list[SnapshotTurn]


class GroupLagView(_View):
    group: str
    topic: str
    committed: int
    end: int
    lag: int


class DeadLetterView(_View):
    """A dead letter of the project: where it came from and the error that stopped it."""

    stage: str
    source_topic: str
    source_partition: int
    source_offset: int
    error_class: str
    error: str
    retriable: bool
    attempts: int
    failed_at: datetime


class StageProcessView(_View):
    name: str
    state: str


class PipelineStatus(_View):
    """What the pipeline is doing. ``problems`` says what could not be read."""

    groups: list[GroupLagView]
    dead_letter_counts: dict[str, int] = Field(description="records ever written, all projects")
    dead_letters: list[DeadLetterView] = Field(
        description="the project's recent ones: this page of them (offset, limit)"
    )
    project_dead_letters: int = Field(
        default=0, description="how many recent ones of the project there are in all"
    )
    hidden_dead_letters: int = Field(description="recent ones of other projects or unreadable")
    processes: list[StageProcessView] = Field(description="local stage processes (mongomem up)")
    restarts: list[StageRestarts] = Field(description="restarts of each stage, as recorded")
    problems: list[str]


def _not_found(what: str) -> JSONResponse:
    body = {"type": NOT_FOUND, "message": f"no such {what}", "retriable": False}
    return JSONResponse({"error": body}, status_code=404)


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"the inspector could not read MongoDB: {exc}") from exc


async def list_users(
    settings: Settings, client: Any, project: str, limit: int, offset: int = 0
) -> list[UserSummary]:
    """The project's users (from turns and from memories), by id: ``limit`` of them from
    the ``offset``-th (a page; fewer than ``limit``: the last one).

    ``memories`` counts by the rule of the user's page (``browse/memories``): the
    user's own current memories plus the project's (taxonomic terms, listed on every
    user's page); ``project_memories`` says how many of them are the project's.

    Two aggregations over the project's turns and current memories: the cost
    grows with the project's size (fine for inspection, not for a hot path).
    """
    db = database(client, settings.mongodb)
    turns = await _run(
        db[TURNS].aggregate(
            [
                {"$match": {"project_id": project, **NOT_AN_EVENT}},
                {
                    "$group": {
                        "_id": {"u": "$user_id", "s": "$session_id"},
                        "turns": {"$sum": 1},
                        "last": {"$max": "$created_at"},
                    }
                },
            ]
        )
    )
    memories = await _run(
        db[MEMORIES].aggregate(
            [
                {"$match": {"scope.project_id": project, "status": "current"}},
                {"$group": {"_id": "$scope.user_id", "n": {"$sum": 1}}},
            ]
        )
    )
    users: dict[str, dict[str, Any]] = {}

    def user(uid: str) -> dict[str, Any]:
        return users.setdefault(uid, {"turns": 0, "sessions": 0, "memories": 0, "last": None})

    async for row in turns:
        u = user(str(row["_id"]["u"]))
        u["turns"] += int(row["turns"])
        u["sessions"] += 1
        last = row.get("last")
        if last is not None and (u["last"] is None or last > u["last"]):
            u["last"] = last
    shared = 0
    async for row in memories:
        if row["_id"] is None:  # the project's memories: every user's page lists them too
            shared = int(row["n"])
        else:
            user(str(row["_id"]))["memories"] = int(row["n"])
    return [
        UserSummary(
            user_id=uid,
            turns=u["turns"],
            sessions=u["sessions"],
            memories=u["memories"] + shared,
            project_memories=shared,
            last_activity=u["last"],
        )
        for uid, u in sorted(users.items())[offset : offset + limit]
    ]


def _decision(doc: dict[str, Any]) -> DecisionRecord:
    return DecisionRecord(
        candidate_id=str(doc.get("candidate_id", doc["_id"])),
        action=str(doc["action"]),
        memory_id=str(doc["memory_id"]),
        version=int(doc["version"]),
        base_version=doc.get("base_version"),
        memory_type=str(doc.get("memory_type", "")),
        key=str(doc.get("key", "")),
        key_match=bool(doc.get("key_match", False)),
        similarity=doc.get("similarity"),
        scores=[Score.model_validate(s) for s in doc.get("scores", ())],
        reason=str(doc.get("reason", "")),
        judged=bool(doc.get("judged", False)),
        needs_judge=bool(doc.get("needs_judge", False)),
        ask_about=doc.get("ask_about"),
        differences=[str(d) for d in doc.get("differences", ())],
        model_says_corrects=doc.get("model_says_corrects"),
        attempts=doc.get("attempts"),
        at=doc["at"],
    )


def _project_of_letter(letter: DeadLetter) -> str | None:
    """The project named by a dead letter's original message, if it can be read."""
    raw = letter.original_value()
    try:
        envelope = json.loads(raw) if raw is not None else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(envelope, dict):
        return None
    data = envelope.get("data", envelope)
    if isinstance(data, dict) and isinstance(data.get("fullDocument"), dict):
        data = data["fullDocument"]  # a change event the watcher could not turn into a turn
    if not isinstance(data, dict):
        return None
    scope = data.get("scope")
    project = data.get("project_id") or (
        scope.get("project_id") if isinstance(scope, dict) else None
    )
    return project if isinstance(project, str) else None


async def pipeline_status(
    settings: Settings, client: Any, project: str, limit: int = 1000, offset: int = 0
) -> PipelineStatus:
    """Lag per consumer group, dead letters, restarts, local processes (see the module doc).

    The project's recent dead letters are paged (``limit`` from the ``offset``-th, in
    the order they were read); ``project_dead_letters`` counts them all.
    """
    problems: list[str] = []
    restarts = await read_restarts(database(client, settings.mongodb))
    groups: list[GroupLagView] = []
    counts: dict[str, int] = {}
    mine: list[DeadLetterView] = []
    hidden = 0
    try:
        from mongomem.local.supervisor import local_servers, local_stage_processes
        from mongomem.operations.status import (
            dead_letter_counts,
            group_lag,
            recent_dead_letters,
            stage_groups,
        )
    except MongomemError as exc:  # the [stages] extra is not installed
        return PipelineStatus(
            groups=[],
            dead_letter_counts={},
            dead_letters=[],
            hidden_dead_letters=0,
            processes=[],
            restarts=restarts,
            problems=[str(exc)],
        )
    types = enabled_types(settings)
    kafka = settings.kafka
    stages = ["watcher", "windowing", "reconciler"] + [f"extractor.{t}" for t in types]

    async def read_kafka() -> None:
        nonlocal hidden
        for stage in ("windowing", "extractor", "reconciler"):
            for group, topic in stage_groups(kafka, stage, types):
                lag = await group_lag(kafka, group, topic)
                groups.append(
                    GroupLagView(
                        group=group, topic=topic, committed=lag.committed, end=lag.end, lag=lag.lag
                    )
                )
        counts.update(await dead_letter_counts(kafka, stages))
        for letter in await recent_dead_letters(kafka, stages, DEAD_LETTERS_PER_PARTITION):
            if _project_of_letter(letter) != project:
                hidden += 1
                continue
            mine.append(
                DeadLetterView.model_validate(letter.model_dump(exclude={"key_b64", "value_b64"}))
            )

    try:
        await asyncio.wait_for(read_kafka(), KAFKA_WAIT_S)
    except TimeoutError:
        problems.append("Kafka did not answer in time: lag and dead letters unavailable")
    except MongomemError as exc:
        log.warning("inspector: %s", exc)
        problems.append("Kafka could not be read: lag and dead letters unavailable")
    local = [(f"local {n}", s) for n, s in local_servers(settings, supervised=True)]
    processes = [
        StageProcessView(name=n, state=s) for n, s in [*local, *local_stage_processes(settings)]
    ]
    return PipelineStatus(
        groups=groups,
        dead_letter_counts=counts,
        dead_letters=mine[offset : offset + limit],
        project_dead_letters=len(mine),
        hidden_dead_letters=hidden,
        processes=processes,
        restarts=restarts,
        problems=problems,
    )


def inspector_router() -> APIRouter:
    """The ``/v1/inspector`` routes (behind the key, like every ``/v1`` route)."""
    router = APIRouter(
        prefix="/v1/inspector", route_class=AnsweringRoute, responses=ERRORS, tags=["inspector"]
    )

    @router.get("/users", response_model=Answer[list[UserSummary]], summary="The project's users")
    async def users(
        request: Request,
        project: Project,
        limit: Annotated[int, Query(ge=1, le=1000, description="users in this page")] = 200,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="users skipped, by id")] = 0,
    ) -> Response:
        backend = backend_of(request)
        found = await list_users(backend.settings, backend.client, project, limit, offset)
        return result(found)

    @router.get(
        "/memories/{memory_id}/decisions",
        response_model=Answer[DecisionLog],
        summary="The decision log of a memory, with scores, thresholds and the judge's reasons",
    )
    async def decisions(
        request: Request,
        project: Project,
        memory_id: Annotated[str, Path(min_length=1, max_length=1024)],
        limit: Annotated[int, Query(ge=1, le=1000, description="decisions in this page")] = 1000,
        offset: Annotated[
            int, Query(ge=0, le=MAX_OFFSET, description="decisions skipped, oldest first")
        ] = 0,
    ) -> Response:
        backend = backend_of(request)
        db = database(backend.client, backend.settings.mongodb)
        memory_id = check_memory_id(segment(memory_id))  # the rule of every memory route
        query = {"memory_id": memory_id, "scope.project_id": project}
        order = [("at", 1), ("_id", 1)]
        docs = await _run(db[DECISIONS].find(query).sort(order).skip(offset).to_list(limit))
        total = await _run(db[DECISIONS].count_documents(query))
        log_ = DecisionLog(
            memory_id=memory_id,
            thresholds=Thresholds.from_settings(backend.settings.reconcile),
            decisions=[_decision(d) for d in docs],
            total=total,
        )
        return result(log_)

    @router.get(
        "/snapshots/{snapshot_id}",
        response_model=Answer[SnapshotView],
        summary="One snapshot of a session and its turns",
    )
    async def snapshot(
        request: Request,
        project: Project,
        snapshot_id: Annotated[str, Path(min_length=1, max_length=1024)],
    ) -> Response:
        backend = backend_of(request)
        db = database(backend.client, backend.settings.mongodb)
        doc = await _run(
            db[SNAPSHOTS].find_one({"_id": segment(snapshot_id), "project_id": project})
        )
        if doc is None:
            return _not_found("snapshot")
        view = SnapshotView(
            snapshot_id=str(doc["_id"]),
            user_id=doc["user_id"],
            session_id=doc["session_id"],
            first_seq=doc["first_seq"],
            last_seq=doc["last_seq"],
            reason=doc["reason"],
            closed_at=doc["closed_at"],
            turns=[SnapshotTurn.model_validate(t) for t in doc.get("turns", ())],
        )
        return result(view)

    @router.get(
        "/pipeline",
        response_model=Answer[PipelineStatus],
        summary="Consumer lag per group, the project's dead letters, local stage processes",
    )
    async def pipeline(
        request: Request,
        project: Project,
        limit: Annotated[int, Query(ge=1, le=1000, description="dead letters in this page")] = 1000,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="dead letters skipped")] = 0,
    ) -> Response:
        backend = backend_of(request)
        status = await pipeline_status(backend.settings, backend.client, project, limit, offset)
        return result(status)

    return router


#: The page's files, and how each is served.
_UI_FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
#: The headers of the page and its files (and of ``/docs``): nothing but ``'self'`` runs.
UI_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def ui_router() -> APIRouter:
    """``GET /ui`` (the page), ``/ui/app.js``, ``/ui/app.css``: public, static, undocumented."""
    router = APIRouter(include_in_schema=False)
    package = resources.files("mongomem.ui")
    for suffix, (name, media_type) in _UI_FILES.items():
        serve = _static((package / name).read_bytes(), media_type)
        router.add_api_route(f"/ui{suffix}", serve, methods=["GET"], name=f"ui:{name}")
    return router


def _static(body: bytes, media_type: str) -> Any:
    async def serve() -> Response:
        return Response(body, media_type=media_type, headers=UI_HEADERS)

    return serve
