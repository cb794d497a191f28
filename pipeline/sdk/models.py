"""Typed requests and results of the long-term memory SDK."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import AwareDatetime, Field, model_validator

from mongomem.errors import InputError
from mongomem.ltm.deletes import Deleted
from mongomem.models import Action, Evidence, Frozen, MemoryStatus, MemoryType, MemoryVersion
from mongomem.ranking import HitRanks, hit_ranks

__all__ = [
    "ContextItem",
    "DeleteResult",
    "Episode",
    "HitRanks",
    "MemoryContext",
    "MemoryItem",
    "MemoryPage",
    "MemoryRecord",
    "MemoryRequestContext",
    "Procedure",
    "SaveResult",
    "SearchHit",
    "SemanticMemory",
    "TaxonomicTerm",
    "VersionRecord",
    "hit_ranks",
    "item_of",
    "record_of",
    "typed",
]


class MemoryRequestContext(Frozen):
    """Who is asking (SPEC F1, F2).

    A standalone caller passes its end user's ``user_id`` (and the
    ``session_id`` of the conversation). A context created for a **service
    account** uses the service account's own identity for memory: any
    ``user_id`` given with it is ignored, so every invocation through that
    account shares one user scope. This is a documented limitation.
    """

    user_id: str | None = None
    session_id: str | None = None
    service_account: str | None = None

    @model_validator(mode="after")
    def _someone(self) -> MemoryRequestContext:
        if self.user_id is None and self.service_account is None:
            raise ValueError("a context needs a user_id or a service_account")
        return self


class MemoryRecord(Frozen):
    """The current version of one memory, whatever its type."""

    memory_id: str
    version: int
    version_id: str
    memory_type: str
    key: str
    text: str
    fields: dict[str, Any]
    reinforcement_count: int
    created_at: AwareDatetime
    updated_at: AwareDatetime


class SemanticMemory(MemoryRecord):
    label: str


class Episode(MemoryRecord):
    title: str
    content: str


class Procedure(MemoryRecord):
    name: str
    description: str
    content: str


class TaxonomicTerm(MemoryRecord):
    domain: str
    term: str
    definition: str
    variants: tuple[str, ...] = ()


M = TypeVar("M", bound=MemoryRecord)


class SearchHit(Frozen, Generic[M]):
    """One search result: the memory, its cosine similarity to the query, and its ranks.

    Hits come in fused order (:attr:`ranks`); ``score`` stays the cosine, so a
    ``min_score`` means the same whichever retriever found the hit.
    """

    memory: M
    score: float
    ranks: HitRanks | None = None


class SaveResult(Frozen):
    """What a save did: ADD, UPDATE or REINFORCE, and the resulting version."""

    action: Action
    memory_id: str
    version: int
    version_id: str
    reason: str


class VersionRecord(Frozen):
    """One version in a memory's history (SPEC D2)."""

    version_id: str
    version: int
    action: Action
    status: MemoryStatus
    key: str
    text: str
    fields: dict[str, Any]
    reinforcement_count: int
    evidence: tuple[Evidence, ...]
    created_at: AwareDatetime
    updated_at: AwareDatetime
    superseded_at: AwareDatetime | None = None
    superseded_by: str | None = None
    reason: str | None = None
    actor: str | None = None


class MemoryItem(VersionRecord):
    """One version of one memory, as browsing lists it (SPEC J3)."""

    memory_id: str
    memory_type: str


class MemoryPage(Frozen):
    """A page of :class:`MemoryItem`; pass ``next_cursor`` for the next (``None``: last page)."""

    items: tuple[MemoryItem, ...]
    next_cursor: str | None = None


def item_of(version: MemoryVersion) -> MemoryItem:
    return MemoryItem.model_validate(version.model_dump(exclude={"scope", "embedding"}))


class DeleteResult(Frozen):
    """What a delete did (SPEC J1): the memory's ``DELETE`` version.

    ``already_deleted`` is true when the memory had been deleted before; that
    earlier deletion is answered and nothing changes.
    """

    memory_id: str
    memory_type: str
    key: str
    version: int
    version_id: str
    deleted_at: AwareDatetime
    actor: str
    reason: str | None = None
    already_deleted: bool = False


class ContextItem(Frozen):
    memory_type: str
    memory_id: str
    key: str
    text: str
    score: float


class MemoryContext(Frozen):
    """What :meth:`build_context` found, and the same rendered as text within a budget."""

    query: str
    items: tuple[ContextItem, ...] = Field(default=())
    text: str
    truncated: bool = False
    omitted: int = 0


#: The longest ``reason`` a delete keeps.
MAX_REASON_CHARS = 1000


def check_memory_id(memory_id: object) -> str:
    """``memory_id`` if it can name a memory, else :class:`InputError` naming the field."""
    if not isinstance(memory_id, str) or not memory_id.strip() or len(memory_id) > 128:
        raise InputError("memory_id must be a memory's id (1-128 characters)", field="memory_id")
    return memory_id


def check_reason(reason: object) -> str | None:
    """A delete's ``reason`` (optional text of at most :data:`MAX_REASON_CHARS`), or
    :class:`InputError` naming the field."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InputError(
            f"reason must be text of at most {MAX_REASON_CHARS} characters", field="reason"
        )
    return reason


def delete_result(found: Deleted) -> DeleteResult:
    v = found.version
    return DeleteResult(
        memory_id=v.memory_id,
        memory_type=v.memory_type,
        key=v.key,
        version=v.version,
        version_id=v.version_id,
        deleted_at=v.created_at,
        actor=v.actor or "",
        reason=v.reason,
        already_deleted=found.already,
    )


def record_of(version: MemoryVersion) -> MemoryRecord:
    return MemoryRecord(
        memory_id=version.memory_id,
        version=version.version,
        version_id=version.version_id,
        memory_type=version.memory_type,
        key=version.key,
        text=version.text,
        fields=dict(version.fields),
        reinforcement_count=version.reinforcement_count,
        created_at=version.created_at,
        updated_at=version.updated_at,
    )


def typed(record: MemoryRecord) -> MemoryRecord:
    """The record as the model of its type (``SemanticMemory``, ``Episode`` …)."""
    base = record.model_dump()
    f = record.fields
    match record.memory_type:
        case MemoryType.SEMANTIC:
            return SemanticMemory(**base, label=f["label"])
        case MemoryType.EPISODIC:
            return Episode(**base, title=f["title"], content=f["content"])
        case MemoryType.PROCEDURAL:
            return Procedure(
                **base, name=f["name"], description=f["description"], content=f["content"]
            )
        case MemoryType.TAXONOMIC:
            return TaxonomicTerm(
                **base,
                domain=f["domain"],
                term=f["term"],
                definition=f["definition"],
                variants=tuple(f.get("variants", ())),
            )
    return record
