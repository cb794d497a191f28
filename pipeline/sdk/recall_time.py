"""Time and subject in recall (SPEC L3, L5): filters over versions, for any ranker.

``as_of`` asks what was current at a moment: the value of a memory then is the
version holding its latest evidence said at or before that moment (every
evidence point counts, in the order of the world — the same timeline the
reconciler keeps, :func:`~mongomem.ltm.plan.history_order`); a memory first
stated later, or deleted (or expired) by then, had no value. It is a filter
over a memory's history, so it composes with whatever ranked the memories:
a search ranks the current memories, then each hit is replaced by its value
as of then (or dropped). A memory whose current text has drifted far from the
query may therefore rank lower than its old value would have — the ranker
sees what is current.

``subject`` keeps the memories about one person (SPEC L3): ``"user"`` (or
``None`` on the memory) is the user; any other name matches case-insensitively.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mongomem.errors import InputError
from mongomem.models import CLOSED_STATUSES
from mongomem.sdk.models import MemoryRecord, VersionRecord

__all__ = ["USER_SUBJECT", "check_as_of", "matches_subject", "value_at", "with_value"]

#: The ``subject`` that names the user (a memory with no subject is about the user).
USER_SUBJECT = "user"


def check_as_of(as_of: object) -> datetime | None:
    """``as_of`` if it is an aware datetime (or ``None``), else :class:`InputError`."""
    if as_of is None:
        return None
    if not isinstance(as_of, datetime) or as_of.tzinfo is None:
        raise InputError("as_of must be a timezone-aware datetime", field="as_of")
    return as_of


def value_at(history: Sequence[VersionRecord], at: datetime) -> VersionRecord | None:
    """The version whose value was current at ``at`` (see the module docstring)."""
    ended = [
        v for v in history if v.status in CLOSED_STATUSES and (v.observed_at or v.created_at) <= at
    ]
    stated = [
        (e.at, v.version, v)
        for v in history
        if v.status not in CLOSED_STATUSES
        for e in v.evidence
        if e.at <= at
    ]
    if not stated:
        return None
    said, _, version = max(stated, key=lambda point: (point[0], point[1]))
    if any(v.created_at >= said for v in ended):
        return None  # deleted or expired after its last statement before ``at``
    return version


def with_value(record: MemoryRecord, version: VersionRecord) -> MemoryRecord:
    """``record`` (a current memory) showing ``version``'s value instead."""
    return record.model_copy(
        update={
            "version": version.version,
            "version_id": version.version_id,
            "key": version.key,
            "text": version.text,
            "fields": dict(version.fields),
            "reinforcement_count": version.reinforcement_count,
            "created_at": version.created_at,
            "updated_at": version.updated_at,
            "observed_at": version.observed_at,
            "subject": version.subject,
            "event": version.event,
        }
    )


def matches_subject(record: MemoryRecord, subject: str | None) -> bool:
    """Is ``record`` about ``subject`` (``None``: no filter)?"""
    if subject is None:
        return True
    wanted = " ".join(subject.split()).casefold()
    mine = (record.subject or USER_SUBJECT).casefold()
    return mine == wanted
