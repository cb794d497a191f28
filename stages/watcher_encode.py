"""Kafka records of ``turns`` documents for the watcher, with a fast path.

The full path — :func:`mongomem.stm.turns.turn_from_document` (pydantic validation,
the turn-id check) and then :func:`mongomem.codec.encode` (``model_dump``,
``json.dumps``) — costs more per turn than reading the turn from the change
stream. The watcher drains backlogs at the rate MongoDB hands them over, so
:meth:`TurnEncoder.record` first tries :func:`fast_value`: a structural check
that admits only documents in the plain shape :mod:`mongomem.stm.turns` writes
(exact ``str``/``int``/``dict``/``list`` types, a UTC or naive ``datetime``,
plain-JSON metadata, a ``_id`` equal to ``Turn.make_id`` of its session and
seq, ids that pass :func:`~mongomem.models.check_identifier`) and writes the
envelope with orjson, in one call. orjson writes what ``json.dumps`` writes
for those types, except a float's exponent (``1e-7`` for ``1e-07``): metadata
holding a float is written by ``json`` (an ``orjson.Fragment``).

**The fast path decides nothing the full path would decide differently.**
Whenever :func:`fast_value` returns bytes, ``turn_from_document`` accepts the
document and ``encode`` of that turn gives the same bytes (property-tested in
``tests/property/test_watcher_encode.py``); whenever the document is anything
else it returns ``None`` and :meth:`TurnEncoder.record` runs the full path,
whose :class:`pydantic.ValidationError` still sends the document to the
dead-letter topic.

A document with an ``event`` field is an event of the turns stream, not a
turn: ``"end"`` (:class:`~mongomem.models.SessionEnd`, written by
``end_session``) becomes a ``session-end`` record, keyed by its session like
its turns; any other event is not valid (dead-lettered). Only the full path
sees them (the fast path refuses any extra field).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from bson.tz_util import utc as bson_utc

from mongomem.codec import SCHEMA_VERSION, encode, kind_of
from mongomem.models import Role, SessionKey, Turn, check_identifier
from mongomem.stages.watcher_logic import Slot
from mongomem.stm.turns import end_from_document, turn_from_document

__all__ = ["EncodedTurn", "SessionParts", "TurnEncoder", "fast_value"]

_KIND = kind_of(Turn)
#: The settings of :func:`mongomem.codec.encode`, built once.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: orjson writes what ``_JSON`` writes for exact str/int/bool/None/dict/list
#: (floats aside, see :func:`fast_value`) and a UTC ``datetime`` as pydantic
#: does; a subclass is refused rather than converted.
_ORJSON = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z
_ROLES = frozenset(r.value for r in Role)
_REQUIRED = frozenset(
    {"_id", "project_id", "user_id", "session_id", "seq", "role", "content", "created_at"}
)
#: Deeper metadata takes the full path (the fast check recurses).
_MAX_DEPTH = 32
#: Sessions whose ids passed ``check_identifier`` (:class:`SessionParts`).
_KEYS_CACHED = 65_536
_NO_METADATA: dict[str, Any] = {}


class EncodedTurn(NamedTuple):
    """One seq of a session as a Kafka record (a turn or a session end).

    Its session, seq, key and envelope bytes, and its time (UTC).
    """

    slot: Slot
    seq: int
    key: bytes
    value: bytes
    created_at: datetime


class SessionParts(NamedTuple):
    """What every turn of one valid session shares, computed once per session."""

    key: bytes
    #: SHA-256 fed with the session part of :meth:`Turn.make_id`; copied per turn.
    id_hash: Any


class TurnEncoder:
    """Documents of ``turns`` → :class:`EncodedTurn` (fast path, full path fallback).

    Remembers the sessions whose ids were checked, so a session's later turns
    skip that check; ``fast``/``full`` count the turns taken by each path.
    """

    def __init__(self) -> None:
        self._sessions: dict[Slot, SessionParts] = {}
        self.fast = 0
        self.full = 0

    def record(self, doc: Mapping[str, Any]) -> EncodedTurn:
        """The record of ``doc``; :class:`pydantic.ValidationError` when it is not a turn."""
        fast = fast_value(doc, self._sessions)
        if fast is not None:
            self.fast += 1
            return fast
        self.full += 1
        if "event" in doc:
            end = end_from_document(doc)
            slot = (end.project_id, end.user_id, end.session_id)
            return EncodedTurn(slot, end.seq, end.session.kafka_key(), encode(end), end.created_at)
        turn = turn_from_document(doc)
        slot = (turn.project_id, turn.user_id, turn.session_id)
        key = SessionKey.model_construct(
            project_id=turn.project_id, user_id=turn.user_id, session_id=turn.session_id
        ).kafka_key()  # already validated as part of the turn
        return EncodedTurn(slot, turn.seq, key, encode(turn), turn.created_at)


def fast_value(doc: Mapping[str, Any], known: dict[Slot, SessionParts]) -> EncodedTurn | None:
    """The record of a document in the plain shape of a valid turn, else ``None``.

    ``known`` holds the sessions whose ids are valid (:class:`SessionParts`);
    this function adds to it (and empties it when it grows past a bound).
    """
    if type(doc) is not dict:
        return None
    try:
        turn_id = doc["_id"]
        project, user, session = doc["project_id"], doc["user_id"], doc["session_id"]
        seq, role, content = doc["seq"], doc["role"], doc["content"]
        created = doc["created_at"]
    except KeyError:
        return None
    metadata = doc.get("metadata", _NO_METADATA)
    # Every required field is there: no other one is when the count is right.
    # ``bucket`` (the watcher share's, not the turn's) is optional, and not in the record.
    optional = (metadata is not _NO_METADATA) + ("bucket" in doc)
    if len(doc) != len(_REQUIRED) + optional:
        return None
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
    if not (tz is None or tz is bson_utc or tz is UTC):  # naive is read as UTC
        return None
    slot = (project, user, session)
    parts = known.get(slot)
    if parts is None:
        parts = _session_parts(slot)
        if parts is None:
            return None
        if len(known) >= _KEYS_CACHED:
            known.clear()
        known[slot] = parts
    # Turn.make_id(project, user, session, seq), from the session's hash state.
    id_hash = parts.id_hash.copy()
    id_hash.update(b"%d" % seq)
    if turn_id != "turn_" + id_hash.hexdigest()[:24]:
        return None
    meta: Any = metadata
    if metadata:
        floats = _plain_dict(metadata, 0)
        if floats is None:
            return None
        if floats:  # orjson writes exponents as 1e-7, json as 1e-07
            meta = orjson.Fragment(_JSON.encode(metadata))
    # The bytes of mongomem.codec.encode: the fields in model order, compact,
    # non-ASCII as UTF-8, a UTC time with a "Z" as pydantic writes it.
    try:
        value = orjson.dumps(
            {
                "kind": _KIND,
                "v": SCHEMA_VERSION,
                "data": {
                    "turn_id": turn_id,
                    "project_id": project,
                    "user_id": user,
                    "session_id": session,
                    "seq": seq,
                    "role": role,
                    "content": content,
                    "metadata": meta,
                    "created_at": created,
                },
            },
            option=_ORJSON,
        )
    except orjson.JSONEncodeError:  # an unpaired surrogate or a huge seq: the full path says
        return None
    return EncodedTurn(
        slot, seq, parts.key, value, created if tz is not None else created.replace(tzinfo=UTC)
    )


def _session_parts(slot: Slot) -> SessionParts | None:
    """The shared parts of a session's turns; ``None`` when an id is not valid."""
    try:
        for part in slot:
            check_identifier(part)
        key = "\x00".join(slot).encode()
        id_hash = hashlib.sha256("\x00".join((*slot, "")).encode())
    except (ValueError, UnicodeEncodeError):
        return None
    return SessionParts(key, id_hash)


def _plain_dict(value: dict[Any, Any], depth: int) -> bool | None:
    """Whether a dict of plain JSON holds a float; ``None`` when it is not plain JSON.

    Plain: exact dict (with str keys)/list/str/int/finite float/bool/None.
    Containers deeper than ``_MAX_DEPTH`` are refused (the full path decides).
    """
    if depth >= _MAX_DEPTH:
        return None
    for key in value:
        if type(key) is not str:
            return None
    return _plain_items(value.values(), depth)


def _plain_items(items: Iterable[Any], depth: int) -> bool | None:
    """:func:`_plain_dict` for the items of a container at ``depth``."""
    floats = False
    for item in items:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if not math.isfinite(item):
                return None
            floats = True
            continue
        if kind is dict:
            inner = _plain_dict(item, depth + 1)
        elif kind is list:
            inner = _plain_items(item, depth + 1) if depth + 1 < _MAX_DEPTH else None
        else:
            return None
        if inner is None:
            return None
        floats = floats or inner
    return floats
