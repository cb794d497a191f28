"""The HTTP API shared by the memory service and :class:`HttpTransport` (SPEC G2, G5).

Every operation of :class:`~mongomem.sdk.MemoryTransport` is one route of
:data:`ROUTES`; the service derives its FastAPI routes and its OpenAPI
document from that table, and the client its requests. The caller is in the
path (``/v1/users/{user_id}/…``: a ``user_id`` beginning with ``sa:`` is a
service account) with an optional ``session_id`` query parameter (in the path
for turns); the project is the API key's, and a ``project_id`` query parameter,
when given, must name it (403 otherwise: a client set up for another project).
Path segments are percent-encoded (``/`` as ``%2F``: a taxonomic key is
``domain/term``). A ``GET`` or ``DELETE`` carries the other arguments as query
parameters, a ``POST`` as a JSON object. A success
answers ``200 {"result": ...}``, a failure an :class:`ErrorBody` under
``"error"`` (:mod:`mongomem.sdk.errormap`):

======================  ======  ==============================================  ==================
operation               method  path (under ``/v1/users/{user_id}``)            result
======================  ======  ==============================================  ==================
``save``                POST    ``/memories/{memory_type}``                     SaveResult
``list_memories``       GET     ``/memories/{memory_type}``                     [MemoryRecord]
``search``              POST    ``/memories/{memory_type}/search``              [SearchHit]
``get``                 GET     ``/memories/{memory_type}/{key}``               MemoryRecord (404)
``delete_by_key``       DELETE  ``/memories/{memory_type}/{key}``               DeleteResult (404)
``get_memory``          GET     ``/memory/{memory_id}``                         MemoryItem (404)
``delete``              DELETE  ``/memory/{memory_id}``                         DeleteResult (404)
``history``             GET     ``/memory/{memory_id}/history``                 [VersionRecord]
``browse_memories``     GET     ``/browse/memories``                            MemoryPage
``count_memories``      GET     ``/browse/memories/count``                      int
``browse_sessions``     GET     ``/browse/sessions``                            SessionPage
``browse_turns``        GET     ``/browse/sessions/{session_id}/turns``         TurnPage
``list_domains``        GET     ``/domains``                                    [str]
``build_context``       POST    ``/context``                                    MemoryContext
``search_turns``        POST    ``/turns/search``                               [TurnHit]
``record_turn``         POST    ``/sessions/{session_id}/turns``                Turn
``recent_turns``        GET     ``/sessions/{session_id}/turns``                [Turn]
``end_session``         POST    ``/sessions/{session_id}/end``                  SessionEnd
``processing_status``   GET     ``/sessions/{session_id}/status``               ProcessingStatus
``list_sessions``       GET     ``/sessions``                                   [SessionSummary]
``erase_user``          DELETE  (the user itself)                               ErasureResult
``erase_session``       DELETE  ``/sessions/{session_id}``                      ErasureResult
======================  ======  ==============================================  ==================

The arguments of each are those of its request model in :data:`OPERATIONS`,
less the caller's fields and the path's.

Two routes stream, so they are outside the table (:mod:`mongomem.service.export_routes`):
``GET /v1/users/{user_id}/export`` answers the user's export as NDJSON
(:data:`NDJSON`, one line at a time; an answer without its ``end`` line was cut
short) and ``POST /v1/users/{user_id}/import`` takes one as an NDJSON body,
read line by line, and answers ``{"result": ImportResult}`` (SPEC J4).

The service trusts none of the identity: it resolves it again with
:func:`~mongomem.sdk.resolve_identity` inside the project the API key belongs to.

A ``save`` with ``idempotency_key`` may be sent again (after a timeout, a 503):
the repeat answers the first one's result and changes nothing; the same key
with a different request answers 422 with ``field: "idempotency_key"``
(:mod:`mongomem.sdk.idempotency`). Without the key a save is sent as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictFloat

from mongomem.erasure.erase import ErasureResult
from mongomem.models import BUILTIN_MEMORY_TYPES, MAX_SPEAKER, NOT_BLANK, SessionEnd, Turn
from mongomem.operations.progress import ProcessingStatus
from mongomem.ranking import MAX_QUERY_CHARS
from mongomem.sdk.context import DEFAULT_CONTEXT_TYPES
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
from mongomem.stm.search import TurnHit
from mongomem.stm.turns import SessionPage, SessionSummary, TurnPage

__all__ = [
    "CALLER_FIELDS",
    "EXPORT_PATH",
    "IMPORT_PATH",
    "MAX_QUERY_CHARS",
    "NDJSON",
    "OPERATIONS",
    "ROUTES",
    "Answer",
    "BrowseMemoriesRequest",
    "BrowseSessionsRequest",
    "BrowseTurnsRequest",
    "BuildContextRequest",
    "Caller",
    "CountMemoriesRequest",
    "DeleteByKeyRequest",
    "DeleteRequest",
    "EraseSessionRequest",
    "EraseUserRequest",
    "ErrorBody",
    "GetMemoryRequest",
    "GetRequest",
    "HistoryRequest",
    "HttpRoute",
    "LimitRequest",
    "ListRequest",
    "RecordTurnRequest",
    "SaveRequest",
    "SearchRequest",
    "SearchTurnsRequest",
    "SessionRequest",
]


#: An id as the document states it (``format: mongomem-id``; checked by the call, which
#: names the field).
IdText = Annotated[
    str, Field(min_length=1, max_length=128, json_schema_extra={"format": "mongomem-id"})
]
_VISIBLE_NO_CONTROL = "^[^\\x00-\\x1f\\x7f]*[^\\s\\x00-\\x1f\\x7f][^\\x00-\\x1f\\x7f]*$"
#: The built-in memory types, as a JSON value (a context's ``include``).
_MEMORY_TYPES: list[JsonValue] = list(sorted(BUILTIN_MEMORY_TYPES))
#: A metadata key: not empty, no control character or '.', not starting with '$'.
_METADATA_KEY = "^[^$.\\x00-\\x1f\\x7f][^.\\x00-\\x1f\\x7f]*$"
#: No C0 or C1 control character, and one that is not white space.
_CONTROL = "\\x00-\\x1f\\x7f-\\x9f"
_SPEAKER_PATTERN = f"^[^{_CONTROL}]*[^\\s{_CONTROL}][^{_CONTROL}]*$"
#: A speaker as the document states it: ``format: mongomem-speaker`` stands for the rest
#: of mongomem.models.check_speaker (no invisible or bidirectional character).
SpeakerText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_SPEAKER,
        json_schema_extra={"pattern": _SPEAKER_PATTERN, "format": "mongomem-speaker"},
    ),
]


class Caller(BaseModel):
    """Who a call is for: the fields of a resolved :class:`~mongomem.sdk.Identity`."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    project_id: str
    user_id: str
    session_id: str | None = None
    service_account: bool = False


class SaveRequest(Caller):
    memory_type: str
    # Any values: the memory kind names a missing or non-string field itself.
    fields: dict[str, Any]
    # Checked by mongomem.sdk.idempotency, which names the field.
    idempotency_key: str | None = None


class GetRequest(Caller):
    memory_type: str
    key: str


class SearchRequest(Caller):
    memory_type: str
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NOT_BLANK)
    limit: int = Field(default=5, ge=1, le=1000)
    domain: str | None = None


class ListRequest(Caller):
    memory_type: str
    limit: int = Field(default=50, ge=1, le=1000)
    domain: str | None = None


class BuildContextRequest(Caller):
    """``build_context`` in one call (:func:`~mongomem.sdk.context.compose_context`)."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NOT_BLANK)
    include: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CONTEXT_TYPES),
        max_length=16,
        json_schema_extra={"items": {"type": "string", "enum": _MEMORY_TYPES}},
    )
    limit_per_type: int = Field(default=5, ge=1, le=1000)
    max_chars: int = Field(default=4000, ge=1)
    min_score: StrictFloat | None = None  # a JSON true is no score
    include_turns: int = Field(default=0, ge=0, le=50)


class SearchTurnsRequest(Caller):
    """``search_turns``: a user's turns of every session, hybrid-ranked (SPEC M2).

    An unknown field (a filter that does not exist), a ``query`` over
    :data:`~mongomem.ranking.MAX_QUERY_CHARS`, or ``since`` after ``until``
    answers 422.
    """

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NOT_BLANK)
    limit: int = Field(default=10, ge=1, le=100)
    sessions: list[IdText] | None = Field(default=None, max_length=1000)
    speaker: SpeakerText | None = None
    since: datetime | None = None
    until: datetime | None = None
    neighbours: int = Field(default=0, ge=0, le=5)
    #: When the question is asked: later turns left out, time expressions resolved there.
    as_of: datetime | None = None


class HistoryRequest(Caller):
    """A memory's versions in the order of the world; ``offset``/``limit`` page them
    (``limit`` unset: every version from ``offset``)."""

    memory_id: str
    offset: int = Field(default=0, ge=0, le=1_000_000)
    limit: int | None = Field(default=None, ge=1, le=1000)


class DeleteRequest(Caller):
    memory_id: str
    reason: str | None = None


class DeleteByKeyRequest(Caller):
    memory_type: str
    key: str
    reason: str | None = None


class SessionRequest(Caller):
    """A call about the caller's session: ``session_id`` is required."""

    session_id: str


class CountMemoriesRequest(Caller):
    # Checked by mongomem.ltm.browse.make_filter, which names the field.
    memory_type: str | None = None
    status: str = "current"
    updated_since: datetime | None = None
    key_prefix: str | None = None


class BrowseMemoriesRequest(CountMemoriesRequest):
    limit: int = Field(default=50, ge=1, le=1000)
    cursor: str | None = None


class GetMemoryRequest(Caller):
    memory_id: str


class BrowseSessionsRequest(Caller):
    limit: int = Field(default=100, ge=1, le=1000)
    cursor: str | None = None
    active_since: datetime | None = None


class BrowseTurnsRequest(SessionRequest):
    limit: int = Field(default=100, ge=1, le=1000)
    cursor: str | None = None


class RecordTurnRequest(Caller):
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    # Plain JSON; its keys (here and nested) are not empty, have no control character or
    # '.', and do not start with '$' (the document says it of the top level's keys).
    metadata: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"propertyNames": {"pattern": _METADATA_KEY}}
    )
    # ISO 8601 with an offset; checked (aware, not in the future, in order) by the STM.
    at: datetime | None = None
    # Who spoke besides the role (SPEC L3); checked (no control characters) by the STM.
    speaker: SpeakerText | None = None


class LimitRequest(Caller):
    # the STM's MONGOMEM_STM_MAX_RECENT_TURNS (default 1000) bounds it; checked by the STM
    limit: int = Field(ge=1, le=1000)


class EraseUserRequest(Caller):
    """Erase the caller's user (SPEC J2); ``confirm`` must be true."""

    confirm: bool = False


class EraseSessionRequest(SessionRequest):
    """Erase the caller's session (SPEC J2); ``confirm`` must be true."""

    confirm: bool = False


class ErrorBody(BaseModel):
    """What went wrong: the :mod:`mongomem.errors` class name and what it carries."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str
    message: str
    retriable: bool = False
    field: str | None = None
    retry_after: float | None = None


#: Operation name → the model of its request body.
OPERATIONS: dict[str, type[Caller]] = {
    "save": SaveRequest,
    "get": GetRequest,
    "search": SearchRequest,
    "list_memories": ListRequest,
    "list_domains": Caller,
    "build_context": BuildContextRequest,
    "search_turns": SearchTurnsRequest,
    "history": HistoryRequest,
    "delete": DeleteRequest,
    "delete_by_key": DeleteByKeyRequest,
    "processing_status": SessionRequest,
    "browse_memories": BrowseMemoriesRequest,
    "count_memories": CountMemoriesRequest,
    "get_memory": GetMemoryRequest,
    "browse_sessions": BrowseSessionsRequest,
    "browse_turns": BrowseTurnsRequest,
    "record_turn": RecordTurnRequest,
    "recent_turns": LimitRequest,
    "end_session": Caller,
    "list_sessions": LimitRequest,
    "erase_user": EraseUserRequest,
    "erase_session": EraseSessionRequest,
}


#: The fields of :class:`Caller`: who a call is for, never an argument.
CALLER_FIELDS = frozenset(Caller.model_fields)

T = TypeVar("T")


class Answer(BaseModel, Generic[T]):
    """A success: ``{"result": ...}``."""

    result: T


@dataclass(frozen=True)
class HttpRoute:
    """How one operation travels: its method, its path and the type of its result."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    result: Any
    summary: str

    @property
    def path_fields(self) -> tuple[str, ...]:
        """The names of the path's ``{placeholders}``, in order."""
        return tuple(re.findall(r"{(\w+)}", self.path))

    def arguments(self, operation: str) -> tuple[str, ...]:
        """The operation's arguments that travel in the query (GET, DELETE) or the body (POST)."""
        fields = OPERATIONS[operation].model_fields
        return tuple(f for f in fields if f not in CALLER_FIELDS and f not in self.path_fields)


_USER = "/v1/users/{user_id}"

#: The streaming routes (not in :data:`ROUTES`): a user's export, and an import into one.
EXPORT_PATH = f"{_USER}/export"
IMPORT_PATH = f"{_USER}/import"
#: The media type of an export: JSON lines.
NDJSON = "application/x-ndjson"

#: Operation → its route (the module table). The service serves exactly these.
ROUTES: dict[str, HttpRoute] = {
    "save": HttpRoute(
        "POST",
        f"{_USER}/memories/{{memory_type}}",
        SaveResult,
        "Save a memory: ADD, UPDATE or REINFORCE, reconciled as extracted ones are",
    ),
    "list_memories": HttpRoute(
        "GET",
        f"{_USER}/memories/{{memory_type}}",
        list[MemoryRecord],
        "The current memories of a type, newest first",
    ),
    "search": HttpRoute(
        "POST",
        f"{_USER}/memories/{{memory_type}}/search",
        list[SearchHit[MemoryRecord]],
        "Search the memories of a type by meaning",
    ),
    "get": HttpRoute(
        "GET",
        f"{_USER}/memories/{{memory_type}}/{{key}}",
        MemoryRecord,
        "The current memory with this key (404 if there is none)",
    ),
    "list_domains": HttpRoute(
        "GET", f"{_USER}/domains", list[str], "The taxonomic domains of the project"
    ),
    "build_context": HttpRoute(
        "POST",
        f"{_USER}/context",
        MemoryContext,
        "Memories relevant to a query, by type, rendered within a character budget",
    ),
    "search_turns": HttpRoute(
        "POST",
        f"{_USER}/turns/search",
        list[TurnHit],
        "The user's turns of every session best for a query (BM25 and cosine fused), "
        "filtered by session, speaker and time range",
    ),
    "delete_by_key": HttpRoute(
        "DELETE",
        f"{_USER}/memories/{{memory_type}}/{{key}}",
        DeleteResult,
        "Delete the current memory with this key: a DELETE version closes its history",
    ),
    "get_memory": HttpRoute(
        "GET",
        f"{_USER}/memory/{{memory_id}}",
        MemoryItem,
        "A memory by id, in whatever status (404 if it is not the caller's)",
    ),
    "delete": HttpRoute(
        "DELETE",
        f"{_USER}/memory/{{memory_id}}",
        DeleteResult,
        "Delete a memory by id: a DELETE version closes its history (404 if none)",
    ),
    "history": HttpRoute(
        "GET",
        f"{_USER}/memory/{{memory_id}}/history",
        list[VersionRecord],
        "Every version of a memory, oldest first, with its evidence",
    ),
    "browse_memories": HttpRoute(
        "GET",
        f"{_USER}/browse/memories",
        MemoryPage,
        "Memory versions by type, status, update time and key prefix, newest first, paged",
    ),
    "count_memories": HttpRoute(
        "GET", f"{_USER}/browse/memories/count", int, "How many versions the filter matches"
    ),
    "browse_sessions": HttpRoute(
        "GET", f"{_USER}/browse/sessions", SessionPage, "The user's sessions by id, paged"
    ),
    "browse_turns": HttpRoute(
        "GET",
        f"{_USER}/browse/sessions/{{session_id}}/turns",
        TurnPage,
        "A session's turns by sequence number, paged",
    ),
    "record_turn": HttpRoute(
        "POST",
        f"{_USER}/sessions/{{session_id}}/turns",
        Turn,
        "Record a conversation turn (short-term memory)",
    ),
    "recent_turns": HttpRoute(
        "GET",
        f"{_USER}/sessions/{{session_id}}/turns",
        list[Turn],
        "The session's latest turns, in order",
    ),
    "end_session": HttpRoute(
        "POST",
        f"{_USER}/sessions/{{session_id}}/end",
        SessionEnd,
        "End the session now: its window closes at once (an event in the turns stream)",
    ),
    "processing_status": HttpRoute(
        "GET",
        f"{_USER}/sessions/{{session_id}}/status",
        ProcessingStatus,
        "For each snapshot of the session and each type: pending, done or dead-lettered",
    ),
    "list_sessions": HttpRoute(
        "GET", f"{_USER}/sessions", list[SessionSummary], "The user's sessions, latest first"
    ),
    "erase_user": HttpRoute(
        "DELETE",
        _USER,
        ErasureResult,
        "Erase the user: every turn, snapshot, memory and record derived from them "
        "(confirm=true required; irreversible)",
    ),
    "erase_session": HttpRoute(
        "DELETE",
        f"{_USER}/sessions/{{session_id}}",
        ErasureResult,
        "Erase one session of the user and what was derived from it "
        "(confirm=true required; irreversible)",
    ),
}
