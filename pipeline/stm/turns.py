"""Short-term memory (SPEC A1–A3): the ``turns`` collection.

A turn is written with one ``insert_one`` and the caller never waits for the
pipeline; the change-stream watcher (:mod:`mongomem.stages.watcher`) carries it on.

Sequence numbers
----------------
Each session's turns are numbered 1, 2, 3 … strictly increasing and gap-free,
also with concurrent writers in many processes, and without transactions.
**The insert itself is the allocation**: a turn's ``_id`` is
``Turn.make_id(project, user, session, seq)`` and a unique index covers
(project, user, session, seq), so inserting seq *n* succeeds for exactly one
writer. A writer tries ``last + 1``; on a duplicate-key error it reads the
session's current last seq and tries again (with jittered back-off once it
has lost a few times). Because a writer only ever tries ``last_seen + 1`` and
turns are never deleted, no number is skipped: there is no counter that could
be advanced by a writer that then dies before its insert, so the
"allocated but never written" gap cannot happen.

Within one :class:`ShortTermMemory` the writes of one session are serialised
by a per-session lock and the last seq is cached, so a process that owns a
session (the usual agent) pays one round trip per turn; the cache is only a
hint — being behind costs one conflict and one read, never a wrong number.

Seq *n + 1* is only ever tried by a writer that has seen *n* stored, so a
session's inserts also reach the oplog in seq order — the watcher relies on
that to back-fill by per-session high-water mark.

If the connection drops during the insert, the outcome is unknown; the turn
is looked up by its id and returned if it was stored, otherwise
:class:`~mongomem.errors.StorageError` (retriable) is raised. An insert still
in flight on the server can land after that look-up; a caller that retries
then stores the turn twice under two seqs — a duplicate, never a gap. Turns
are append-only: deleting single turns would break the numbering (a deleted
*session* restarts at 1 only in processes that have not cached it).

``created_at`` is truncated to milliseconds (what BSON stores), so the
returned :class:`~mongomem.models.Turn` equals the one read back and the one
the watcher publishes. :meth:`ShortTermMemory.list_sessions` aggregates the
user's turns (served by the unique index on MongoDB); it is meant for
listing, not for hot paths.

Validation (A3) happens before anything is sent to MongoDB; a bad argument
raises :class:`~mongomem.errors.InputError` whose ``field`` names it.

Ending a session
----------------
:meth:`ShortTermMemory.end_session` stores a :class:`~mongomem.models.SessionEnd`
in ``turns`` at the session's next seq, allocated as a turn's is — a document
with ``"event": "end"`` and no role or content (:func:`end_document`). It is
an event of the turns stream (the watcher carries it, windowing closes the
open window on it, a replay meets it at the same place), not a turn: the
readers here leave it out (``recent_turns``, ``list_sessions``), and it is in
no snapshot. A later turn takes the next seq and starts a new window.

Historical import (J7): ``record_turn(..., at=)`` stores a past turn with its
own time as ``created_at`` and the time of the write as ``recorded_at``. The
order check (never before the session's previous turn) is made against the
last turn this process knows of, and again after every seq conflict with the
turn that won, so a turn out of order is refused before anything is stored.
Sessions and turns are also listed a page at a time (J3), by session id and by
seq: orders that never change, so a cursor neither skips nor repeats.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import math
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, DuplicateKeyError, PyMongoError

from mongomem.adapters.mongo import TURNS, Document
from mongomem.buckets import session_bucket
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import InputError, StateConflict, StorageError
from mongomem.models import (
    MAX_JSON_DEPTH,
    Role,
    SessionEnd,
    SessionKey,
    Turn,
    check_identifier,
    check_speaker,
    utcnow,
)
from mongomem.settings import StmSettings

__all__ = [
    "END_EVENT",
    "FUTURE_SKEW_S",
    "NOT_AN_EVENT",
    "SESSION_SEQ_INDEX",
    "SessionPage",
    "SessionSummary",
    "ShortTermMemory",
    "TurnPage",
    "end_document",
    "end_from_document",
    "last_turn_seq",
    "read_last",
    "session_key",
    "turn_document",
    "turn_from_document",
    "validate_at",
    "validate_content",
    "validate_limit",
    "validate_metadata",
    "validate_role",
    "validate_speaker",
]

SESSION_SEQ_INDEX = "session_seq_unique"
_MAX_ATTEMPTS = 64
#: Seqs asked for at once when finding a session's last seq (:meth:`ShortTermMemory._read_last`).
_PROBES = 64
_MAX_DEPTH = MAX_JSON_DEPTH
_INT64 = 2**63
_CACHE_SIZE = 10_000
_ALLOWED_ROLES = ", ".join(r.value for r in Role)


class SessionSummary(BaseModel):
    """One session of a user, as listed by :meth:`ShortTermMemory.list_sessions`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: str
    user_id: str
    session_id: str
    turn_count: int
    last_seq: int
    last_activity: AwareDatetime


class SessionPage(BaseModel):
    """A page of sessions (by ``session_id``); ``next_cursor`` continues (``None``: last)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: tuple[SessionSummary, ...]
    next_cursor: str | None = None


class TurnPage(BaseModel):
    """A page of one session's turns (by ``seq``); ``next_cursor`` continues (``None``: last)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: tuple[Turn, ...]
    next_cursor: str | None = None


def _cursor(kind: str, after: object) -> str:
    raw = json.dumps([kind, after]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(kind: str, cursor: object, value_type: type) -> Any:
    """What a ``kind`` cursor says to start after, or :class:`InputError` naming ``cursor``."""
    try:
        if not isinstance(cursor, str):
            raise TypeError(cursor)
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, after = json.loads(raw)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise StateConflict("cursor is not one this call returned", field="cursor") from None
    if found != kind or type(after) is not value_type:
        raise StateConflict(f"cursor is not a cursor of {kind}", field="cursor")
    return after


# --------------------------------------------------------------------------- validation


def _identifier(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{field} must be a string, got {type(value).__name__}", field=field)
    try:
        return check_identifier(value)
    except ValueError as exc:
        raise InputError(f"{field} {exc}: {value[:40]!r}", field=field) from None


def session_key(project_id: object, user_id: object, session_id: object) -> SessionKey:
    """A :class:`SessionKey`, or :class:`InputError` naming the bad id."""
    return SessionKey(
        project_id=_identifier(project_id, "project_id"),
        user_id=_identifier(user_id, "user_id"),
        session_id=_identifier(session_id, "session_id"),
    )


def _check_key(key: object) -> SessionKey:
    if not isinstance(key, SessionKey):
        raise InputError(f"key must be a SessionKey, got {type(key).__name__}", field="key")
    # A SessionKey built with model_construct() skips validation: check its ids again
    # (the key itself is kept: a valid id is returned unchanged).
    _identifier(key.project_id, "project_id")
    _identifier(key.user_id, "user_id")
    _identifier(key.session_id, "session_id")
    return key


def validate_role(role: object) -> Role:
    if isinstance(role, Role):
        return role
    if isinstance(role, str):
        try:
            return Role(role)
        except ValueError:
            pass
    shown = repr(role)[:40]
    raise InputError(f"role must be one of {_ALLOWED_ROLES}, got {shown}", field="role")


def _utf8_len(text: str, where: str, field: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{where} is not valid Unicode text (unpaired surrogate at {exc.start})", field=field
        ) from None


def validate_content(content: object, max_bytes: int) -> str:
    if not isinstance(content, str):
        raise InputError(f"content must be a string, got {type(content).__name__}", field="content")
    size = _utf8_len(content, "content", "content")
    if size > max_bytes:
        raise InputError(
            f"content is {size} bytes (UTF-8); the limit is {max_bytes}", field="content"
        )
    return content


def _json_value(value: object, path: str, depth: int) -> Any:
    """``value`` as plain JSON types (tuples become lists), or :class:`InputError`."""
    if depth > _MAX_DEPTH:
        raise InputError(f"{path} nests deeper than {_MAX_DEPTH} levels", field="metadata")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InputError(f"{path} is an integer outside 64 bits", field="metadata")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{path} is {value}, which JSON cannot hold", field="metadata")
        return float(value)
    if isinstance(value, str):
        _utf8_len(value, path, "metadata")
        return str(value)
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[_metadata_key(k, path)] = _json_value(v, f"{path}.{k}", depth + 1)
        return out
    raise InputError(
        f"{path} is not JSON-serialisable (a {type(value).__name__})", field="metadata"
    )


def _metadata_key(key: object, path: str) -> str:
    if not isinstance(key, str):
        raise InputError(
            f"{path} has a key that is not a string ({type(key).__name__})", field="metadata"
        )
    shown = repr(key)[:40]
    if not key:
        raise InputError(f"{path} has an empty key", field="metadata")
    _utf8_len(key, f"{path} key {shown}", "metadata")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise InputError(f"{path} key {shown} contains control characters", field="metadata")
    if key.startswith("$") or "." in key:
        raise InputError(
            f"{path} key {shown} must not start with '$' or contain '.'", field="metadata"
        )
    return key


def validate_metadata(metadata: object, max_bytes: int) -> dict[str, Any]:
    """Plain-JSON metadata (a new dict), or :class:`InputError` naming the path."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InputError(
            f"metadata must be a mapping, got {type(metadata).__name__}", field="metadata"
        )
    plain: dict[str, Any] = _json_value(metadata, "metadata", 0)
    size = len(json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        raise InputError(
            f"metadata is {size} bytes as JSON; the limit is {max_bytes}", field="metadata"
        )
    return plain


#: How far in the future ``record_turn(..., at=)`` may be: the clock skew allowed
#: between the caller's clock and this process's.
FUTURE_SKEW_S = 5.0


def validate_at(at: object, now: datetime) -> datetime:
    """A historical turn's own time (UTC, to the millisecond), or :class:`InputError`
    naming ``at``: it must be an aware datetime no later than ``now`` + :data:`FUTURE_SKEW_S`."""
    if not isinstance(at, datetime):
        raise InputError(f"at must be a datetime, got {type(at).__name__}", field="at")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InputError("at must be timezone-aware (e.g. datetime(..., tzinfo=UTC))", field="at")
    if at - now > timedelta(seconds=FUTURE_SKEW_S):
        raise InputError(
            f"at ({at.isoformat()}) is in the future (more than {FUTURE_SKEW_S:g}s ahead of "
            f"{now.isoformat()})",
            field="at",
        )
    try:
        return _millis(at.astimezone(UTC))
    except OverflowError:
        raise InputError("at is out of range", field="at") from None


def validate_speaker(speaker: object) -> str:
    """A turn's ``speaker``, or :class:`InputError` (``field="speaker"``) saying why not."""
    if not isinstance(speaker, str):
        raise InputError("speaker must be a string", field="speaker")
    try:
        return check_speaker(speaker)
    except ValueError as exc:
        raise InputError(f"speaker {exc}", field="speaker") from None


def validate_limit(limit: object, maximum: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InputError(f"limit must be an integer from 1 to {maximum}", field="limit")
    return limit


# --------------------------------------------------------------------------- documents


def turn_document(turn: Turn) -> Document:
    """The ``turns`` document of a turn (``_id`` is the turn id)."""
    return (
        {
            "_id": turn.turn_id,
            "project_id": turn.project_id,
            "user_id": turn.user_id,
            "session_id": turn.session_id,
            "seq": turn.seq,
            "role": turn.role.value,
            "content": turn.content,
            "metadata": turn.metadata,
            "created_at": turn.created_at,
            "bucket": session_bucket(turn.project_id, turn.user_id, turn.session_id),
        }
        | ({} if turn.recorded_at is None else {"recorded_at": turn.recorded_at})
        | ({} if turn.speaker is None else {"speaker": turn.speaker})
    )


_T = TypeVar("_T", Turn, SessionEnd)
#: Is a document found after a lost connection the one this writer inserted?
_Same = Callable[[Mapping[str, Any]], bool]

#: The ``event`` field of the ``turns`` document of a :class:`~mongomem.models.SessionEnd`.
END_EVENT = "end"
#: The filter that keeps the turns of ``turns`` and leaves out its events.
NOT_AN_EVENT: Document = {"event": {"$exists": False}}


def end_document(end: SessionEnd) -> Document:
    """The ``turns`` document of a session end (``_id`` is the id of its seq)."""
    return {
        "_id": end.seq_id,
        "project_id": end.project_id,
        "user_id": end.user_id,
        "session_id": end.session_id,
        "seq": end.seq,
        "event": END_EVENT,
        "created_at": end.created_at,
        "bucket": session_bucket(end.project_id, end.user_id, end.session_id),
    }


def end_from_document(doc: Mapping[str, Any]) -> SessionEnd:
    """The session end stored in ``doc``; :class:`pydantic.ValidationError` if it is not one."""
    fields = {k: v for k, v in doc.items() if k not in _NOT_TURN_FIELDS}
    if fields.pop("event", None) != END_EVENT:
        fields["event"] = doc.get("event")  # not an end: the model refuses the field
    created = fields.get("created_at")
    if isinstance(created, datetime) and created.tzinfo is None:
        fields["created_at"] = created.replace(tzinfo=UTC)
    return SessionEnd.model_validate({"seq_id": doc.get("_id"), **fields})


#: Fields of a ``turns`` document that are not the turn's: its id, its session's
#: bucket (:func:`~mongomem.buckets.session_bucket`, for the watcher shares), and the
#: lineage mark that windowing once added to the turns it snapshotted (documents of
#: older versions; lineage is now read from the snapshots, :mod:`mongomem.stm.lineage`).
_NOT_TURN_FIELDS = frozenset({"_id", "bucket", "snapshot_id"})


def turn_from_document(doc: Mapping[str, Any]) -> Turn:
    """The turn stored in ``doc`` (naive datetimes are read as UTC).

    A ``snapshot_id`` (an older version's lineage mark) is not part of the turn.
    Raises :class:`pydantic.ValidationError` when the document is not a turn.
    """
    fields = {k: v for k, v in doc.items() if k not in _NOT_TURN_FIELDS}
    for name in ("created_at", "recorded_at"):
        at = fields.get(name)
        if isinstance(at, datetime) and at.tzinfo is None:
            fields[name] = at.replace(tzinfo=UTC)
    return Turn.model_validate({"turn_id": doc.get("_id"), **fields})


def _millis(at: datetime) -> datetime:
    """BSON dates hold milliseconds: truncate so the stored turn equals the returned one."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _filter(key: SessionKey) -> Document:
    return {"project_id": key.project_id, "user_id": key.user_id, "session_id": key.session_id}


# --------------------------------------------------------------------------- adapter


class ShortTermMemory:
    """Record and read the turns of sessions (SPEC A1–A3).

    ``db`` should come from :func:`mongomem.adapters.mongo.connect` (tz-aware client).
    """

    def __init__(
        self,
        db: AsyncDatabase[Document],
        limits: StmSettings | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._turns = db[TURNS]
        self._erasures = ErasureRegister(db, remember_absent=True)
        self._limits = limits or StmSettings()
        self._clock = clock
        # per session: the last seq and its turn's created_at (a hint, see the module doc)
        self._last: OrderedDict[tuple[str, str, str], tuple[int, datetime | None]] = OrderedDict()
        self._locks: dict[tuple[str, str, str], tuple[asyncio.Lock, int]] = {}

    @property
    def limits(self) -> StmSettings:
        return self._limits

    async def ensure_indexes(self) -> None:
        """The unique (project, user, session, seq) index; it also serves every read."""
        try:
            await self._turns.create_index(
                [
                    ("project_id", ASCENDING),
                    ("user_id", ASCENDING),
                    ("session_id", ASCENDING),
                    ("seq", ASCENDING),
                ],
                unique=True,
                name=SESSION_SEQ_INDEX,
            )
        except PyMongoError as exc:
            raise StorageError(f"could not create the indexes of {TURNS!r}: {exc}") from exc

    async def record_turn(
        self,
        key: SessionKey,
        role: Role | str,
        content: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        """Store one turn with the session's next seq and return it.

        ``speaker`` says who spoke besides the role (a display name or participant
        id, SPEC L3): 1–128 characters, not blank, no control characters — else
        :class:`InputError` (``field="speaker"``) and nothing is stored.

        ``at`` records a turn of the past with its own time (historical import,
        SPEC J7): an aware datetime, not later than now plus
        :data:`FUTURE_SKEW_S` (clock skew between writer and server), and not
        earlier than the session's previous turn; else :class:`InputError`
        (``field="at"``) and nothing is stored. Its ``created_at`` is ``at``
        (to the millisecond) and ``recorded_at`` the time of the write.
        """
        key = _check_key(key)
        role_ = validate_role(role)
        text = validate_content(content, self._limits.max_content_bytes)
        meta = validate_metadata(metadata, self._limits.max_metadata_bytes)
        own_time = None if at is None else validate_at(at, self._clock())
        who = None if speaker is None else validate_speaker(speaker)

        def make(seq: int, now: datetime) -> tuple[Turn, Document, _Same]:
            # Every field was checked above (ids, role, content, metadata, time) and the
            # id is derived here: building the model need not validate it again.
            turn = Turn.model_construct(
                turn_id=Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
                project_id=key.project_id,
                user_id=key.user_id,
                session_id=key.session_id,
                seq=seq,
                role=role_,
                content=text,
                metadata=meta,
                created_at=now if own_time is None else own_time,
                recorded_at=None if own_time is None else now,
                speaker=who,
            )
            return turn, turn_document(turn), _same_turn(turn)

        return await self._unless_erased(key, self._append(key, make, own_time))

    async def end_session(self, key: SessionKey) -> SessionEnd:
        """End the session's open window now: store a :class:`SessionEnd` at its next seq.

        Allocated and stored like a turn (see the module docstring); the
        windowing stage closes the window (reason ``end``) when the event
        reaches it, live or in a replay. Ending a session with nothing open
        stores the event all the same and closes nothing.
        """
        key = _check_key(key)

        def make(seq: int, now: datetime) -> tuple[SessionEnd, Document, _Same]:
            end = SessionEnd(
                seq_id=Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
                project_id=key.project_id,
                user_id=key.user_id,
                session_id=key.session_id,
                seq=seq,
                created_at=now,
            )
            return end, end_document(end), _same_end(end)

        return await self._unless_erased(key, self._append(key, make))

    async def _unless_erased(self, key: SessionKey, append: Coroutine[Any, Any, _T]) -> _T:
        """Run ``append`` (a write of the session) unless the user or session is erased.

        The register (SPEC J3) costs a turn no round trip of its own: a session
        the register knows as erased writes nothing; one it read as not erased
        less than :data:`~mongomem.erasure.register.NOT_ERASED_TTL_S` ago writes
        at once (an erasure sweeps again after that long); otherwise the read
        goes out *beside* the write, and if it finds the session erased, the
        document just written is deleted again before :class:`Erased` is
        raised (the watcher may have published it meanwhile: windowing drops
        the turns of erased sessions, as in a replay). A failure of the read
        also removes the write before it is raised, so an error still means
        nothing was stored.
        """
        project_id, user_id, session_id = key.project_id, key.user_id, key.session_id
        remembered = self._erasures.remembered(project_id, user_id, session_id)
        if remembered is True:
            append.close()
            raise self._erasures.refusal(project_id, user_id, session_id)
        if remembered is False:
            return await append
        check = asyncio.ensure_future(self._erasures.is_erased(project_id, user_id, session_id))
        try:
            written = await append
        except BaseException:
            erased_too = check.done() and not check.cancelled() and check.exception() is None
            erased_too = erased_too and check.result()
            check.cancel()
            with contextlib.suppress(BaseException):
                await check
            if erased_too:  # nothing was written, and the session is erased: say so
                raise self._erasures.refusal(project_id, user_id, session_id) from None
            raise
        try:
            erased = await check
        except BaseException:
            await self._take_back(key, written)
            raise
        if erased:
            await self._take_back(key, written)
            raise self._erasures.refusal(project_id, user_id, session_id)
        return written

    async def _take_back(self, key: SessionKey, written: Turn | SessionEnd) -> None:
        """Delete a document this store just wrote (its session turned out to be erased)."""
        self._last.pop((key.project_id, key.user_id, key.session_id), None)
        ident = written.turn_id if isinstance(written, Turn) else written.seq_id
        try:
            await self._turns.delete_one({"_id": ident})
        except PyMongoError as exc:
            raise StorageError(f"could not remove a write refused after it: {exc}") from exc

    async def _append(
        self,
        key: SessionKey,
        make: Callable[[int, datetime], tuple[_T, Document, _Same]],
        own_time: datetime | None = None,
    ) -> _T:
        """Store what ``make`` builds for the session's next seq (see "Sequence numbers").

        ``own_time`` (a historical turn's) must not be earlier than the
        session's previous turn: checked before each attempt, against the last
        turn known, so a turn out of order is refused before anything is stored.
        """
        slot = (key.project_id, key.user_id, key.session_id)
        async with self._session_lock(slot):
            last, last_at = self._last.get(slot) or await self._read_last(key)
            for attempt in range(_MAX_ATTEMPTS):
                seq = last + 1
                if own_time is not None and last_at is not None and own_time < last_at:
                    raise StateConflict(
                        f"at ({own_time.isoformat()}) is earlier than the session's previous "
                        f"turn (seq {last}, {last_at.isoformat()}); turns are recorded in order",
                        field="at",
                    )
                item, doc, same = make(seq, _millis(self._clock()))
                if await self._insert_document(doc, same):
                    self._remember(slot, seq, doc["created_at"])
                    return item
                # Another writer holds ``seq``: catch up and try the next number.
                if attempt >= 2:
                    await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                read, read_at = await self._read_last(key)
                last, last_at = (read, read_at) if read >= seq else (seq, last_at)
        raise StorageError(
            f"could not allocate a seq for session {key.session_id!r} after {_MAX_ATTEMPTS} "
            "conflicts with concurrent writers; try again"
        )

    async def recent_turns(self, key: SessionKey, limit: int = 50) -> list[Turn]:
        """The last ``limit`` turns of the session, oldest first."""
        key = _check_key(key)
        limit = validate_limit(limit, self._limits.max_recent_turns)
        try:
            cursor = (
                self._turns.find({**_filter(key), **NOT_AN_EVENT})
                .sort("seq", DESCENDING)
                .limit(limit)
            )
            docs = await cursor.to_list(length=limit)
        except PyMongoError as exc:
            raise StorageError(f"could not read turns: {exc}") from exc
        return [_parse(doc) for doc in reversed(docs)]

    async def list_sessions(
        self, project_id: str, user_id: str, limit: int = 100
    ) -> list[SessionSummary]:
        """The user's sessions in the project, most recently active first."""
        project = _identifier(project_id, "project_id")
        user = _identifier(user_id, "user_id")
        limit = validate_limit(limit, self._limits.max_recent_turns)
        pipeline: list[Document] = [
            {"$match": {"project_id": project, "user_id": user, **NOT_AN_EVENT}},
            {
                "$group": {
                    "_id": "$session_id",
                    "turn_count": {"$sum": 1},
                    "last_seq": {"$max": "$seq"},
                    "last_activity": {"$max": "$created_at"},
                }
            },
            {"$sort": {"last_activity": -1, "_id": 1}},
            {"$limit": limit},
        ]
        try:
            cursor = await self._turns.aggregate(pipeline)
            rows = await cursor.to_list(length=limit)
        except PyMongoError as exc:
            raise StorageError(f"could not list sessions: {exc}") from exc
        return [_summary(project, user, row) for row in rows]

    async def browse_sessions(
        self,
        project_id: str,
        user_id: str,
        limit: int = 100,
        cursor: str | None = None,
        active_since: datetime | None = None,
    ) -> SessionPage:
        """The user's sessions by ``session_id``, a page at a time (SPEC J3).

        The order is fixed, so paging neither skips nor repeats a session; a
        session started meanwhile appears on a later page if its id sorts after
        the cursor. ``active_since`` keeps sessions with a turn at or after it.
        """
        project = _identifier(project_id, "project_id")
        user = _identifier(user_id, "user_id")
        limit = validate_limit(limit, self._limits.max_recent_turns)
        if active_since is not None and not (
            isinstance(active_since, datetime) and active_since.tzinfo is not None
        ):
            raise InputError("active_since must be a timezone-aware datetime", field="active_since")
        match: Document = {"project_id": project, "user_id": user, **NOT_AN_EVENT}
        pipeline: list[Document] = [{"$match": match}]
        if cursor is not None:
            after = _after("sessions", cursor, str)
            pipeline[0]["$match"]["session_id"] = {"$gt": after}
        pipeline += [
            {
                "$group": {
                    "_id": "$session_id",
                    "turn_count": {"$sum": 1},
                    "last_seq": {"$max": "$seq"},
                    "last_activity": {"$max": "$created_at"},
                }
            },
        ]
        if active_since is not None:
            pipeline.append({"$match": {"last_activity": {"$gte": active_since}}})
        pipeline += [{"$sort": {"_id": 1}}, {"$limit": limit + 1}]
        try:
            rows = await (await self._turns.aggregate(pipeline)).to_list(length=limit + 1)
        except PyMongoError as exc:
            raise StorageError(f"could not list sessions: {exc}") from exc
        items = tuple(_summary(project, user, row) for row in rows[:limit])
        more = len(rows) > limit
        return SessionPage(
            items=items, next_cursor=_cursor("sessions", items[-1].session_id) if more else None
        )

    async def browse_turns(
        self, key: SessionKey, limit: int = 100, cursor: str | None = None
    ) -> TurnPage:
        """The session's turns oldest first (by ``seq``), a page at a time (SPEC J3)."""
        key = _check_key(key)
        limit = validate_limit(limit, self._limits.max_recent_turns)
        query = {**_filter(key), **NOT_AN_EVENT}  # an end of the session is not a turn
        if cursor is not None:
            query["seq"] = {"$gt": _after("turns", cursor, int)}
        try:
            docs = await self._turns.find(query).sort("seq", ASCENDING).limit(limit + 1).to_list()
        except PyMongoError as exc:
            raise StorageError(f"could not read turns: {exc}") from exc
        items = tuple(_parse(doc) for doc in docs[:limit])
        more = len(docs) > limit
        return TurnPage(items=items, next_cursor=_cursor("turns", items[-1].seq) if more else None)

    # ------------------------------------------------------------------ internals

    async def _insert_document(self, doc: Document, same: _Same) -> bool:
        """True when stored; False when its seq is taken. ``same``: is a found document this one?"""
        try:
            await self._turns.insert_one(doc)
        except DuplicateKeyError:
            return False
        except ConnectionFailure as exc:
            # The insert may or may not have been applied: look.
            try:
                found = await self._turns.find_one({"_id": doc["_id"]})
            except PyMongoError:
                found = None
            if found is not None and same(found):
                return True
            if found is not None:
                return False
            raise StorageError(f"MongoDB failed during the insert; nothing stored: {exc}") from exc
        except PyMongoError as exc:
            raise StorageError(f"could not store the turn: {exc}") from exc
        return True

    async def _read_last(self, key: SessionKey) -> tuple[int, datetime | None]:
        """The session's last seq (0: none) and that turn's ``created_at``
        (:func:`read_last`)."""
        found = await read_last(self._turns, key, {"created_at": 1})
        if found is None:
            return 0, None
        last_at = found.get("created_at")
        if isinstance(last_at, datetime) and last_at.tzinfo is None:
            last_at = last_at.replace(tzinfo=UTC)
        return int(found["seq"]), last_at if isinstance(last_at, datetime) else None

    def _remember(self, slot: tuple[str, str, str], seq: int, created_at: datetime) -> None:
        self._last[slot] = (seq, created_at)
        self._last.move_to_end(slot)
        while len(self._last) > _CACHE_SIZE:
            self._last.popitem(last=False)

    @asynccontextmanager
    async def _session_lock(self, slot: tuple[str, str, str]) -> AsyncIterator[None]:
        lock, users = self._locks.get(slot, (asyncio.Lock(), 0))
        self._locks[slot] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[slot]
            if users <= 1:
                del self._locks[slot]
            else:
                self._locks[slot] = (lock, users - 1)


def _same_turn(turn: Turn) -> _Same:
    def same(found: Mapping[str, Any]) -> bool:
        return "event" not in found and _parse(found) == turn

    return same


def _same_end(end: SessionEnd) -> _Same:
    def same(found: Mapping[str, Any]) -> bool:
        try:
            return end_from_document(found) == end
        except ValidationError:
            return False

    return same


def _summary(project: str, user: str, row: Mapping[str, Any]) -> SessionSummary:
    at = row["last_activity"]
    if isinstance(at, datetime) and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return SessionSummary(
        project_id=project,
        user_id=user,
        session_id=row["_id"],
        turn_count=row["turn_count"],
        last_seq=row["last_seq"],
        last_activity=at,
    )


def _parse(doc: Mapping[str, Any]) -> Turn:
    try:
        return turn_from_document(doc)
    except ValidationError as exc:
        raise StorageError(
            f"document {doc.get('_id')!r} in {TURNS!r} is not a valid turn: {exc}"
        ) from exc


async def read_last(
    turns: AsyncCollection[Document], key: SessionKey, fields: Mapping[str, int]
) -> Document | None:
    """The session's stored document with the highest seq (a turn or a session end),
    with ``seq`` and ``fields``; ``None``: the session has none.

    Found by ``_id`` alone: seqs are gap-free from 1, so "seq *n* is stored" holds
    exactly for *n* ≤ last, and each probe asks for the ids of up to
    :data:`_PROBES` seqs at once (``_id`` ``$in``), which every server answers from
    its ``_id`` index. A session of fewer than :data:`_PROBES` turns costs one
    round trip; a longer one narrows the range :data:`_PROBES`-fold per round
    trip. (A sort by seq over the session's filter is served by the unique index
    on MongoDB, but mongo-java-server answers it by scanning every turn: issue 28.)
    """
    slot = (key.project_id, key.user_id, key.session_id)
    projection = {**fields, "seq": 1}
    last, last_doc = 0, None
    upper: int | None = None  # the smallest seq known not to be stored
    seqs = list(range(1, _PROBES + 1))
    while True:
        ids = {Turn.make_id(*slot, n): n for n in seqs}
        try:
            found = await turns.find({"_id": {"$in": list(ids)}}, projection).to_list()
        except PyMongoError as exc:
            raise StorageError(f"could not read the session's last seq: {exc}") from exc
        stored = {ids[d["_id"]]: d for d in found if d["_id"] in ids}
        if stored:
            top = max(stored)
            if top > last:
                last, last_doc = top, stored[top]
        absent = [n for n in seqs if n not in stored and n > last]
        if absent:
            upper = min(absent) if upper is None else min(upper, min(absent))
        if upper is not None and upper == last + 1:
            return last_doc
        if upper is None:  # every probe stored: look further, by powers
            seqs = [last * 2**i for i in range(1, 41)]
            continue
        step = max(1, (upper - last) // _PROBES)
        seqs = list(range(last + step, upper, step))[:_PROBES] or [last + 1]


async def last_turn_seq(turns: AsyncCollection[Document], key: SessionKey) -> int:
    """The seq of the session's last *turn* (session ends left out; 0: none), by ``_id``
    alone (:func:`read_last`, then the seqs just below an end)."""
    found = await read_last(turns, key, {"event": 1})
    if found is None:
        return 0
    if "event" not in found:
        return int(found["seq"])
    slot = (key.project_id, key.user_id, key.session_id)
    below = int(found["seq"]) - 1
    while below > 0:
        seqs = list(range(below, max(0, below - _PROBES), -1))
        ids = [Turn.make_id(*slot, n) for n in seqs]
        try:
            docs = await turns.find({"_id": {"$in": ids}}, {"seq": 1, "event": 1}).to_list()
        except PyMongoError as exc:
            raise StorageError(f"could not read the session's last turn: {exc}") from exc
        turned = [int(d["seq"]) for d in docs if "event" not in d]
        if turned:
            return max(turned)
        below = seqs[-1] - 1
    return 0
