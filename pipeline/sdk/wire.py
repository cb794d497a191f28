"""The JSON wire format shared by the memory service and :class:`HttpTransport` (SPEC G2).

Every operation of :class:`~mongomem.sdk.MemoryTransport` is one
``POST /v1/<operation>`` whose JSON body is a :class:`Caller` plus the
operation's arguments; a success answers ``200 {"result": ...}``, a failure
answers an :class:`ErrorBody` under ``"error"``:

==================  =====================================================  ==============
operation           arguments                                              result
==================  =====================================================  ==============
``save``            memory_type, fields, idempotency_key (optional)        SaveResult
``get``             memory_type, key                                       MemoryRecord
                                                                           (404 if none)
``search``          memory_type, query, limit, domain                      [SearchHit]
``list_memories``   memory_type, limit, domain                             [MemoryRecord]
``list_domains``    (none)                                                 [str]
``history``         memory_id                                              [VersionRecord]
``delete``          memory_id, reason (optional)                           DeleteResult
                                                                           (404 if none)
``delete_by_key``   memory_type, key, reason (optional)                    DeleteResult
                                                                           (404 if none)
``processing_status`` (none; the context's session)                       ProcessingStatus
``browse_memories`` memory_type, status, updated_since, key_prefix,        MemoryPage
                    limit, cursor (all optional)
``count_memories``  memory_type, status, updated_since, key_prefix         int
``get_memory``      memory_id                                              MemoryItem
                                                                           (404 if none)
``browse_sessions`` limit, cursor, active_since (optional)                 SessionPage
``browse_turns``    limit, cursor (the context's session)                  TurnPage
``record_turn``     role, content, metadata, at (optional, ISO time)       Turn
``recent_turns``    limit                                                  [Turn]
``list_sessions``   limit                                                  [SessionSummary]
==================  =====================================================  ==============

The caller's identity travels as it was resolved on the client
(:class:`~mongomem.sdk.Identity`), but the service trusts none of it: it
resolves it again with :func:`~mongomem.sdk.resolve_identity` inside the
project the API key belongs to.

A ``save`` with ``idempotency_key`` may be sent again (after a timeout, a 503):
the repeat answers the first one's result and changes nothing; the same key
with a different request answers 422 with ``field: "idempotency_key"``
(:mod:`mongomem.sdk.idempotency`). Without the key a save is sent as before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "OPERATIONS",
    "BrowseMemoriesRequest",
    "BrowseSessionsRequest",
    "BrowseTurnsRequest",
    "Caller",
    "CountMemoriesRequest",
    "DeleteByKeyRequest",
    "DeleteRequest",
    "ErrorBody",
    "GetMemoryRequest",
    "GetRequest",
    "HistoryRequest",
    "LimitRequest",
    "ListRequest",
    "RecordTurnRequest",
    "SaveRequest",
    "SearchRequest",
    "SessionRequest",
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
    query: str
    limit: int = Field(default=5, ge=1, le=1000)
    domain: str | None = None


class ListRequest(Caller):
    memory_type: str
    limit: int = Field(default=50, ge=1, le=1000)
    domain: str | None = None


class HistoryRequest(Caller):
    memory_id: str


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
    role: str
    content: str
    metadata: dict[str, Any] | None = None
    # ISO 8601 with an offset; checked (aware, not in the future, in order) by the STM.
    at: datetime | None = None


class LimitRequest(Caller):
    limit: int


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
    "list_sessions": LimitRequest,
}
