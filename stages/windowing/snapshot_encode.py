"""A closed snapshot as the windowing stage writes it: the Kafka value and the MongoDB document.

The general path — :func:`mongomem.codec.encode` (``model_dump(mode="json")``
then ``json.dumps``) and a ``model_dump`` for the document — cost more per
snapshot than closing it. Both are written here straight from the model's
fields instead:

* :func:`snapshot_value` builds the envelope and writes it with orjson in one
  call. orjson writes what ``json.dumps(..., separators=(",", ":"),
  ensure_ascii=False)`` writes for exact ``str``/``int`` values, and a UTC
  ``datetime`` as pydantic does (``...Z``); a snapshot holds nothing else.
  A snapshot with a time that is not UTC, or that orjson refuses (a lone
  surrogate, an integer beyond 64 bits), takes the general path, which then
  gives the bytes or raises as it always did.
* :func:`snapshot_document` builds the ``snapshots`` document, key for key in
  the order ``model_dump`` gives them.
* :func:`snapshot_encoded` gives both from one pass over the snapshot's fields
  (what the sink sends).

A turn's ``speaker`` (SPEC L3) is written when it has one, after its
``created_at``, and left out when it is ``None``, as the model's encoding does.

**Byte for byte what the general path gives**: ``snapshot_value(s) ==
encode(s)`` for any snapshot, and the document equals — with the same key
order — the ``model_dump`` formula it replaces
(``tests/property/test_windowing_fast_paths.py``); :func:`snapshot_encoded`
gives exactly ``(snapshot_value(s), snapshot_document(s))``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson

from mongomem.adapters.mongo import Document
from mongomem.codec import SCHEMA_VERSION, encode, kind_of
from mongomem.models import Snapshot, SnapshotTurn

__all__ = ["snapshot_document", "snapshot_encoded", "snapshot_value"]

_KIND = kind_of(Snapshot)
#: ``...Z`` for a UTC time, as pydantic writes it; a ``str``/``int`` subclass is refused.
_ORJSON = orjson.OPT_UTC_Z | orjson.OPT_PASSTHROUGH_SUBCLASS
_ZERO = timedelta(0)


def _utc(at: datetime) -> bool:
    return at.utcoffset() == _ZERO


def _turn(turn: SnapshotTurn) -> dict[str, Any]:
    """A turn's fields in model order, its role as a string, its speaker only if it has one."""
    fields = {
        "turn_id": turn.turn_id,
        "seq": turn.seq,
        "role": str(turn.role),
        "content": turn.content,
        "created_at": turn.created_at,
    }
    if turn.speaker is not None:
        fields["speaker"] = turn.speaker
    return fields


def _fields(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot's fields in model order, the turns' roles as strings (what both the
    envelope and the document hold; ``snapshot_id`` is the caller's to place)."""
    return {
        "project_id": snapshot.project_id,
        "user_id": snapshot.user_id,
        "session_id": snapshot.session_id,
        "first_seq": snapshot.first_seq,
        "last_seq": snapshot.last_seq,
        "turns": [_turn(t) for t in snapshot.turns],
        "reason": snapshot.reason,
        "closed_at": snapshot.closed_at,
    }


def _value(snapshot: Snapshot, fields: dict[str, Any]) -> bytes:
    if not _utc(snapshot.closed_at) or not all(_utc(t.created_at) for t in snapshot.turns):
        return encode(snapshot)
    data = {"snapshot_id": snapshot.snapshot_id, **fields}
    try:
        return orjson.dumps({"kind": _KIND, "v": SCHEMA_VERSION, "data": data}, option=_ORJSON)
    except orjson.JSONEncodeError:
        return encode(snapshot)


def _document(snapshot: Snapshot, fields: dict[str, Any]) -> Document:
    return {
        "_id": snapshot.snapshot_id,
        **fields,
        "turn_ids": [t.turn_id for t in snapshot.turns],
    }


def snapshot_value(snapshot: Snapshot) -> bytes:
    """The snapshot's envelope bytes: exactly :func:`mongomem.codec.encode` of it."""
    return _value(snapshot, _fields(snapshot))


def snapshot_document(snapshot: Snapshot) -> Document:
    """The ``snapshots`` document: the snapshot's fields with ``_id`` = ``snapshot_id`` and the
    roles as strings, then ``turn_ids``."""
    return _document(snapshot, _fields(snapshot))


def snapshot_encoded(snapshot: Snapshot) -> tuple[bytes, Document]:
    """``(snapshot_value(snapshot), snapshot_document(snapshot))``, its fields gathered once
    (the two share the turns' dicts: the bytes are written before this returns)."""
    fields = _fields(snapshot)
    return _value(snapshot, fields), _document(snapshot, fields)
