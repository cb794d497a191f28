"""Reading the turns topic: a checked fast path beside :func:`mongomem.codec.decode`.

Nearly every record the windowing stage reads is a well-formed turn, and
decoding it the general way — the standard ``json`` module, then a full
:class:`~mongomem.models.Turn` validation with three identifier checks and
the turn-id hash in Python — was most of the stage's work per record.
:meth:`TurnReader.read` gives the same answer for less:

* ``orjson`` parses the envelope;
* a session's three identifiers are checked once and remembered, with its
  Kafka key and the bytes its turn ids are hashed from;
* the turn's own fields are validated as the :class:`~mongomem.models.SnapshotTurn`
  a window keeps (pydantic-core, the same field types as ``Turn``).

Whatever the fast path is not sure of — bytes ``orjson`` refuses, another
kind or version, missing or extra fields, a type it does not expect, an id
that does not check — goes to :func:`mongomem.codec.decode`, which then gives
the result or raises the :class:`~mongomem.errors.MessageDecodeError`. So the
fast path never accepts what the general decoder refuses, and never refuses
what it accepts (``tests/property/test_windowing_reader.py`` checks both on
arbitrary input).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from mongomem.codec import SCHEMA_VERSION, decode, kind_of, peek_kind
from mongomem.errors import MessageDecodeError
from mongomem.models import SessionEnd, SessionKey, SnapshotTurn, Turn, Watermark
from mongomem.stages.windowing.logic import snapshot_turn

__all__ = ["SESSION_EVENTS", "EndRecord", "TurnReader", "TurnRecord", "read_generic"]

TURN_KIND = kind_of(Turn)
WATERMARK_KIND = kind_of(Watermark)
END_KIND = kind_of(SessionEnd)
#: What windowing workers once produced with their own clock: read and ignored (it proves nothing).
LEGACY_TICK_KIND = "window-tick"

#: A live turn's fields; one with ``recorded_at`` (historical import) or a ``speaker`` takes the
#: general path.
_FIELDS = frozenset(Turn.model_fields) - {"recorded_at", "speaker"}
_FIELDS_WITHOUT_METADATA = _FIELDS - {"metadata"}

#: ``SnapshotTurn.model_validate`` without the wrapper's own work (the same validator).
_validate_turn = SnapshotTurn.__pydantic_validator__.validate_python

#: Sessions whose identifiers are remembered (the memo is emptied when it is full).
_SESSIONS_REMEMBERED = 100_000


@dataclass(slots=True)
class TurnRecord:
    """A turn as the window logic needs it: whose it is, its Kafka key, and the turn.

    Not changed once built, but not ``frozen``: one is built per record, and a frozen
    dataclass's ``__init__`` costs three times as much."""

    session: SessionKey
    key: bytes
    turn: SnapshotTurn
    #: A historical turn's ``recorded_at`` (``None`` for a turn recorded live).
    arrived_at: datetime | None = None

    @property
    def seq(self) -> int:
        return self.turn.seq


@dataclass(slots=True)
class EndRecord:
    """A session end (``end_session``) as the window logic needs it."""

    session: SessionKey
    key: bytes
    end: SessionEnd

    @property
    def seq(self) -> int:
        return self.end.seq


#: What belongs to one session (for ``isinstance``; a tuple is built once, a union per test).
SESSION_EVENTS = (TurnRecord, EndRecord)


@dataclass(frozen=True, slots=True)
class _Session:
    session: SessionKey
    key: bytes
    id_prefix: bytes  # what Turn.make_id hashes, up to the seq


class TurnReader:
    """Decodes records of the turns topic: turns, session ends and watermarks.

    ``None`` is a record to skip: a ``window-tick`` of an older version (it
    carried a windowing process's clock, which proves nothing about the source).
    """

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str, str], _Session] = {}

    def read(self, raw: bytes | None) -> TurnRecord | EndRecord | Watermark | None:
        """The record's turn or watermark (``None``: skip it); raises ``MessageDecodeError``."""
        fast = self._fast(raw)
        return fast if fast is not None else read_generic(raw)

    def _fast(self, raw: bytes | None) -> TurnRecord | None:
        """The turn, when it is plainly well-formed; ``None`` when unsure (never wrong)."""
        if raw is None:
            return None
        try:
            envelope = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if type(envelope) is not dict or envelope.get("kind") != TURN_KIND:
            return None
        version, data = envelope.get("v"), envelope.get("data")
        if type(version) is not int or version != SCHEMA_VERSION or type(data) is not dict:
            return None
        keys = data.keys()
        if keys != _FIELDS and keys != _FIELDS_WITHOUT_METADATA:
            return None
        if "metadata" in data and type(data["metadata"]) is not dict:
            return None
        seq = data["seq"]
        if type(seq) is not int or seq < 1:
            return None
        session = self._session(data["project_id"], data["user_id"], data["session_id"])
        if session is None:
            return None
        turn_id = "turn_" + hashlib.sha256(session.id_prefix + b"%d" % seq).hexdigest()[:24]
        if data["turn_id"] != turn_id:
            return None
        try:
            turn = _validate_turn(
                {
                    "turn_id": turn_id,
                    "seq": seq,
                    "role": data["role"],
                    "content": data["content"],
                    "created_at": data["created_at"],
                }
            )
        except ValidationError:
            return None
        return TurnRecord(session.session, session.key, turn)

    def _session(self, project_id: Any, user_id: Any, session_id: Any) -> _Session | None:
        if type(project_id) is not str or type(user_id) is not str or type(session_id) is not str:
            return None
        names = (project_id, user_id, session_id)
        known = self._sessions.get(names)
        if known is not None:
            return known
        try:
            session = SessionKey(project_id=project_id, user_id=user_id, session_id=session_id)
            joined = "\x00".join(names).encode()
        except ValueError:  # pydantic's ValidationError and UnicodeEncodeError are ValueErrors
            return None
        if len(self._sessions) >= _SESSIONS_REMEMBERED:
            self._sessions.clear()
        known = self._sessions[names] = _Session(session, joined, joined + b"\x00")
        return known


def read_generic(raw: bytes | None) -> TurnRecord | EndRecord | Watermark | None:
    """What :meth:`TurnReader.read` returns, the general way (:func:`~mongomem.codec.decode`)."""
    try:
        turn = decode(raw, Turn)
    except MessageDecodeError:
        kind = peek_kind(raw)
        if kind == WATERMARK_KIND:
            return decode(raw, Watermark)
        if kind == END_KIND:
            end = decode(raw, SessionEnd)
            return EndRecord(end.session, end.session.kafka_key(), end)
        if kind == LEGACY_TICK_KIND:
            return None
        if kind == TURN_KIND:
            raise
        raise MessageDecodeError(
            f"expected a {TURN_KIND!r}, {END_KIND!r} or {WATERMARK_KIND!r} message, "
            f"got kind {kind!r}"
        ) from None
    session = turn.session
    return TurnRecord(session, session.kafka_key(), snapshot_turn(turn), turn.recorded_at)
