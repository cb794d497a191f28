"""Browsing long-term memory (SPEC J3): filtered pages of versions, with a cursor.

:func:`browse` returns the versions of a caller's scopes that match a
:class:`MemoryFilter` — one memory type or all of them, a ``status``
(``current``, ``superseded`` or ``deleted``: the ``DELETE`` version of each
deleted memory), ``updated_since``, a key prefix — newest first by when the
version was written, then by id. That order never changes for a version (a
REINFORCE changes ``updated_at``, not ``created_at``), so paging with the
returned cursor neither skips nor repeats a version, whatever is written
meanwhile; versions written after the first page was read are not in later
pages. A cursor belongs to its filter: with another one it is refused
(:class:`~mongomem.errors.InputError`, ``field="cursor"``).

:func:`count` counts what the filter matches. Both run one query served by the
``scope_status_created`` index that :meth:`MemoryStore.setup` creates.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from pymongo import DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem.errors import InputError, StateConflict, StorageError
from mongomem.ltm.documents import from_document, scope_filter
from mongomem.ltm.kinds import normalize_key
from mongomem.models import MemoryScope, MemoryVersion

__all__ = [
    "BROWSE_INDEX",
    "MemoryFilter",
    "StatusFilter",
    "browse",
    "count",
    "decode_cursor",
    "make_filter",
]

BROWSE_INDEX = "scope_status_created"
StatusFilter = Literal["current", "superseded", "deleted", "expired"]
Doc = dict[str, Any]


class MemoryFilter(BaseModel):
    """Which versions to browse: all of the given scopes' that match every field set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_type: str | None = None
    status: StatusFilter = "current"
    updated_since: AwareDatetime | None = None
    key_prefix: str | None = Field(default=None, max_length=512)

    def fingerprint(self) -> str:
        raw = self.model_dump_json()
        return hashlib.sha256(raw.encode()).hexdigest()[:12]


def make_filter(
    memory_type: str | None = None,
    status: str = "current",
    updated_since: datetime | None = None,
    key_prefix: str | None = None,
) -> MemoryFilter:
    """A :class:`MemoryFilter`, or :class:`InputError` naming the bad field."""
    if updated_since is not None and (
        not isinstance(updated_since, datetime) or updated_since.tzinfo is None
    ):
        raise InputError("updated_since must be a timezone-aware datetime", field="updated_since")
    try:
        return MemoryFilter(
            memory_type=memory_type,
            status=status,
            updated_since=updated_since,
            key_prefix=key_prefix,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "filter"
        raise InputError(f"{field}: {first['msg']}", field=field) from None


def _query(scopes: Sequence[MemoryScope], f: MemoryFilter) -> Doc:
    query: Doc = {
        "$or": [scope_filter(s.project_id, s.user_id) for s in scopes],
        "status": f.status,
    }
    if f.memory_type is not None:
        query["memory_type"] = f.memory_type
    if f.updated_since is not None:
        query["updated_at"] = {"$gte": f.updated_since}
    if f.key_prefix:
        import re

        query["key_norm"] = {"$regex": "^" + re.escape(normalize_key(f.key_prefix))}
    return query


def encode_cursor(f: MemoryFilter, doc: Doc) -> str:
    created = doc["created_at"]
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    raw = json.dumps([f.fingerprint(), created.isoformat(), doc["_id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(f: MemoryFilter, cursor: str) -> tuple[datetime, str]:
    """Where a page starts: after this (created_at, _id); :class:`InputError` if not a cursor
    of this filter."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        fingerprint, created, last_id = json.loads(raw)
        at = datetime.fromisoformat(created)
        if not isinstance(last_id, str) or at.tzinfo is None:
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise StateConflict("cursor is not one this call returned", field="cursor") from None
    if fingerprint != f.fingerprint():
        raise StateConflict(
            "cursor belongs to another filter (type, status, since, prefix)", field="cursor"
        )
    return at, last_id


async def browse(
    memories: AsyncCollection[Doc],
    scopes: Sequence[MemoryScope],
    f: MemoryFilter,
    limit: int,
    cursor: str | None = None,
) -> tuple[list[MemoryVersion], str | None]:
    """One page (without embeddings) and the cursor of the next one (``None``: no more)."""
    query = _query(scopes, f)
    if cursor is not None:
        at, last_id = decode_cursor(f, cursor)
        query = {
            "$and": [
                query,
                {
                    "$or": [
                        {"created_at": {"$lt": at}},
                        {"created_at": at, "_id": {"$lt": last_id}},
                    ]
                },
            ]
        }
    try:
        docs = await memories.find(
            query,
            {"embedding": 0},
            sort=[("created_at", DESCENDING), ("_id", DESCENDING)],
            limit=limit + 1,
        ).to_list()
    except PyMongoError as exc:
        raise StorageError(f"MongoDB read failed: {exc}") from exc
    more = len(docs) > limit
    page = docs[:limit]
    following = encode_cursor(f, page[-1]) if more else None
    return [from_document(d) for d in page], following


async def count(
    memories: AsyncCollection[Doc], scopes: Sequence[MemoryScope], f: MemoryFilter
) -> int:
    """How many versions of ``scopes`` match ``f``."""
    try:
        return int(await memories.count_documents(_query(scopes, f)))
    except PyMongoError as exc:
        raise StorageError(f"MongoDB read failed: {exc}") from exc
