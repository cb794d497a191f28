"""Kafka records of ``turns`` documents for the watcher, with a fast path.

The full path — :func:`pipeline.stm.turn_from_document` (pydantic validation,
the turn-id check) and then :func:`pipeline.codec.encode` (``model_dump``,
``json.dumps``) — costs more per turn than reading the turn from the change
stream. The watcher drains backlogs at the rate MongoDB hands them over, so
:meth:`TurnEncoder.record` first tries :func:`fast_value`: a structural check
that admits only documents in the plain shape :mod:`pipeline.stm` writes
(exact ``str``/``int``/``dict``/``list`` types, a UTC or naive ``datetime``,
plain-JSON metadata, a ``_id`` equal to ``Turn.make_id`` of its session and
seq, ids that pass :func:`~pipeline.models.check_identifier`) and builds the
envelope from it directly.

**The fast path decides nothing the full path would decide differently.**
Whenever :func:`fast_value` returns bytes, ``turn_from_document`` accepts the
document and ``encode`` of that turn gives the same bytes (property-tested in
``tests/property/test_watcher_encode.py``); whenever the document is anything
else it returns ``None`` and :meth:`TurnEncoder.record` runs the full path,
whose :class:`pydantic.ValidationError` still sends the document to the
dead-letter topic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from bson.tz_util import utc as bson_utc

from pipeline.codec import SCHEMA_VERSION, encode, kind_of
from pipeline.models import Role, SessionKey, Turn, check_identifier
from pipeline.stm import turn_from_document
from stages.watcher_logic import Slot

__all__ = ["TurnEncoder", "TurnRecord", "fast_value"]

_KIND = kind_of(Turn)
#: The settings of :func:`pipeline.codec.encode`, built once.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_PREFIX = f'{{"kind":{_JSON.encode(_KIND)},"v":{SCHEMA_VERSION},"data":{{"turn_id":'
#: A JSON string literal, as ``_JSON`` writes it (C accelerated).
_str = json.encoder.encode_basestring
_ROLES = frozenset(r.value for r in Role)
_REQUIRED = frozenset(
    {"_id", "project_id", "user_id", "session_id", "seq", "role", "content", "created_at"}
)
_ALLOWED = _REQUIRED | {"metadata"}
#: Deeper metadata takes the full path (the fast check recurses).
_MAX_DEPTH = 32
#: Sessions whose ids passed ``check_identifier``: their Kafka key.
_KEYS_CACHED = 65_536


class TurnRecord(NamedTuple):
    """One turn as a Kafka record: its session, seq, key and envelope bytes."""

    slot: Slot
    seq: int
    key: bytes
    value: bytes


class TurnEncoder:
    """Documents of ``turns`` → :class:`TurnRecord` (fast path, full path fallback).

    Remembers the sessions whose ids were checked, so a session's later turns
    skip that check; ``fast``/``full`` count the turns taken by each path.
    """

    def __init__(self) -> None:
        self._keys: dict[Slot, bytes] = {}
        self.fast = 0
        self.full = 0

    def record(self, doc: Mapping[str, Any]) -> TurnRecord:
        """The record of ``doc``; :class:`pydantic.ValidationError` when it is not a turn."""
        fast = fast_value(doc, self._keys)
        if fast is not None:
            self.fast += 1
            return fast
        self.full += 1
        turn = turn_from_document(doc)
        slot = (turn.project_id, turn.user_id, turn.session_id)
        key = SessionKey.model_construct(
            project_id=turn.project_id, user_id=turn.user_id, session_id=turn.session_id
        ).kafka_key()  # already validated as part of the turn
        return TurnRecord(slot, turn.seq, key, encode(turn))


def fast_value(doc: Mapping[str, Any], known: dict[Slot, bytes]) -> TurnRecord | None:
    """The record of a document in the plain shape of a valid turn, else ``None``.

    ``known`` maps sessions whose ids are valid to their Kafka key; this
    function adds to it (and empties it when it grows past a bound).
    """
    if type(doc) is not dict or not _REQUIRED <= doc.keys() <= _ALLOWED:
        return None
    turn_id = doc["_id"]
    project, user, session = doc["project_id"], doc["user_id"], doc["session_id"]
    seq, role, content = doc["seq"], doc["role"], doc["content"]
    metadata = doc.get("metadata", {})
    created = doc["created_at"]
    if not (
        type(turn_id) is str
        and type(project) is str
        and type(user) is str
        and type(session) is str
        and type(seq) is int
        and seq >= 1
        and type(role) is str
        and role in _ROLES
        and type(content) is str
        and type(metadata) is dict
        and type(created) is datetime
    ):
        return None
    tz = created.tzinfo
    if tz is not None and tz is not bson_utc and tz is not UTC:
        return None
    slot = (project, user, session)
    key = known.get(slot)
    if key is None:
        key = _valid_key(slot)
        if key is None:
            return None
        if len(known) >= _KEYS_CACHED:
            known.clear()
        known[slot] = key
    if turn_id != Turn.make_id(project, user, session, seq) or not _plain(metadata, 0):
        return None
    # pydantic's form of a UTC time; a naive one is read as UTC (turn_from_document).
    stamp = (created if tz is None else created.replace(tzinfo=None)).isoformat() + "Z"
    # The bytes of pipeline.codec.encode, field by field (model field order).
    try:
        value = "".join(
            (
                _PREFIX, _str(turn_id),
                ',"project_id":', _str(project),
                ',"user_id":', _str(user),
                ',"session_id":', _str(session),
                ',"seq":', str(seq),
                ',"role":', _str(role),
                ',"content":', _str(content),
                ',"metadata":', _JSON.encode(metadata) if metadata else "{}",
                ',"created_at":"', stamp, '"}}',
            )
        ).encode()  # fmt: skip
    except UnicodeEncodeError:  # an unpaired surrogate, not from BSON: the full path says
        return None
    return TurnRecord(slot, seq, key, value)


def _valid_key(slot: Slot) -> bytes | None:
    try:
        for part in slot:
            check_identifier(part)
    except ValueError:
        return None
    return "\x00".join(slot).encode()


def _plain(value: object, depth: int) -> bool:
    """True for JSON made of exact dict/list/str/int/finite float/bool/None."""
    if value is None or type(value) is str or type(value) is int or type(value) is bool:
        return True
    if type(value) is float:
        return math.isfinite(value)
    if depth >= _MAX_DEPTH:
        return False
    if type(value) is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if type(value) is list:
        return all(_plain(v, depth + 1) for v in value)
    return False
